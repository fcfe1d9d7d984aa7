/*
 * The C API from C, on the host, built with -fsanitize=address,undefined (tools/tests/capi.rs
 * builds and runs it): every function, every error code, and the results of `txl score`.
 *
 *   host IMAGE IDS DIGEST STATE [IMAGE IDS DIGEST STATE]...
 *
 * For each model image, IDS is a file of whitespace-separated token ids, DIGEST the digest `txl
 * score IMAGE --tokens IDS --json` printed and STATE the file `txl score ... --state-out STATE`
 * wrote: scoring the ids through the C API must give the same digest, and the state it saves must
 * be the same bytes. The errors of every function are checked on the first image; those of
 * integer images on each integer image. Prints one line per image and "ok" at the end; exits 1
 * at the first failed check, naming it.
 */
#define _POSIX_C_SOURCE 200112L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "txl.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* A call that must return `expected`. */
#define EXPECT(expected, call)                                                                     \
    do {                                                                                           \
        int got_ = (call);                                                                         \
        if (got_ != (expected)) {                                                                  \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d (%s)\n", __FILE__, __LINE__,  \
                    #call, got_, txl_strerror(got_), (int)(expected), txl_strerror(expected));     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define OK(call) EXPECT(TXL_OK, call)

/* 16-byte-aligned zeroed memory, or exit. */
static void *aligned(size_t bytes) {
    void *p = NULL;
    CHECK(posix_memalign(&p, 16, bytes ? bytes : 16) == 0);
    memset(p, 0, bytes ? bytes : 16);
    return p;
}

/* The file at path, 16-byte aligned, its length in *len. */
static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    long size;
    uint8_t *bytes;
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    CHECK(fseek(f, 0, SEEK_END) == 0);
    size = ftell(f);
    CHECK(size >= 0);
    CHECK(fseek(f, 0, SEEK_SET) == 0);
    bytes = aligned((size_t)size);
    CHECK(fread(bytes, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    *len = (size_t)size;
    return bytes;
}

/* FNV-1a (32-bit) over the little-endian bytes of each value: `txl score`'s digest. */
static uint32_t digest(const float *values, size_t n) {
    uint32_t hash = 0x811c9dc5u;
    size_t i;
    int b;
    for (i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &values[i], 4);
        for (b = 0; b < 4; b++) {
            hash = (hash ^ ((bits >> (8 * b)) & 0xffu)) * 0x01000193u;
        }
    }
    return hash;
}

/* The CRC-32 (IEEE) of the image format, to write a damaged image whose CRC is right. */
static uint32_t crc32(const uint8_t *bytes, size_t n) {
    uint32_t crc = 0xffffffffu;
    size_t i;
    int k;
    for (i = 0; i < n; i++) {
        crc ^= bytes[i];
        for (k = 0; k < 8; k++) {
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}

static void put_u32(uint8_t *at, uint32_t value) {
    at[0] = (uint8_t)value;
    at[1] = (uint8_t)(value >> 8);
    at[2] = (uint8_t)(value >> 16);
    at[3] = (uint8_t)(value >> 24);
}

/* A copy of the image, 16-byte aligned, to damage. */
static uint8_t *copy_of(const uint8_t *image, size_t len) {
    uint8_t *copy = aligned(len);
    memcpy(copy, image, len);
    return copy;
}

/* Every image error: each damage gives its code, and leaves the model not set up. */
static void image_errors(const uint8_t *image, size_t len) {
    txl_model model;
    txl_model_info info;
    uint8_t *bad;
    uint8_t *shifted;

    memset(&model, 0, sizeof model);
    EXPECT(TXL_ERR_NULL, txl_model_parse(NULL, image, len));
    EXPECT(TXL_ERR_NULL, txl_model_parse(&model, NULL, len));
    EXPECT(TXL_ERR_MISALIGNED, txl_model_parse((txl_model *)((uint8_t *)&model + 4), image, len));
    EXPECT(TXL_ERR_SIZE_OVERFLOW, txl_model_parse(&model, image, SIZE_MAX));
    EXPECT(TXL_ERR_OVERLAP, txl_model_parse((txl_model *)(void *)image, image, len));
    EXPECT(TXL_ERR_IMAGE_TRUNCATED, txl_model_parse(&model, image, 64));
    EXPECT(TXL_ERR_IMAGE_TRUNCATED, txl_model_parse(&model, image, 0));

    bad = copy_of(image, len);
    bad[0] ^= 1;
    EXPECT(TXL_ERR_IMAGE_BAD_MAGIC, txl_model_parse(&model, bad, len));
    memcpy(bad, image, len);
    put_u32(bad + 8, 99);
    EXPECT(TXL_ERR_IMAGE_VERSION, txl_model_parse(&model, bad, len));
    memcpy(bad, image, len);
    bad[len / 2] ^= 0x40;
    EXPECT(TXL_ERR_IMAGE_CHECKSUM, txl_model_parse(&model, bad, len));
    /* the reserved header field set, with a CRC that matches: a valid CRC, an invalid header */
    memcpy(bad, image, len);
    put_u32(bad + 124, 1);
    put_u32(bad + len - 4, crc32(bad, len - 4));
    EXPECT(TXL_ERR_IMAGE_INVALID, txl_model_parse(&model, bad, len));
    /* n_layer 0, CRC right */
    memcpy(bad, image, len);
    put_u32(bad + 48, 0);
    put_u32(bad + len - 4, crc32(bad, len - 4));
    EXPECT(TXL_ERR_IMAGE_INVALID, txl_model_parse(&model, bad, len));
    free(bad);

    shifted = aligned(len + 16);
    memcpy(shifted + 8, image, len);
    EXPECT(TXL_ERR_IMAGE_MISALIGNED, txl_model_parse(&model, shifted + 8, len));
    free(shifted);

    /* every failure above left the model not set up */
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_model_get_info(&model, &info));
}

/* Every error of the functions on a parsed model and a session of it. */
static void session_errors(const txl_model *model, const txl_options *defaults, const uint32_t *ids,
                           size_t n_ids) {
    txl_model empty_model;
    txl_session session;
    txl_session empty_session;
    txl_options options = *defaults;
    txl_model_info info;
    size_t arena_bytes, state_bytes, written, len;
    uint8_t *arena;
    uint8_t *state;
    uint8_t *block;
    float *row;
    uint32_t bad_tokens[3];
    union {
        uint64_t words[4];
        uint8_t bytes[32];
    } unaligned;

    memset(&empty_model, 0, sizeof empty_model);
    memset(&empty_session, 0, sizeof empty_session);
    OK(txl_model_get_info(model, &info));
    OK(txl_arena_bytes(model, &options, &arena_bytes));
    OK(txl_state_bytes(model, &options, &state_bytes));

    /* the model's functions */
    EXPECT(TXL_ERR_NULL, txl_model_get_info(NULL, &info));
    EXPECT(TXL_ERR_NULL, txl_model_get_info(model, NULL));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_model_get_info(&empty_model, &info));
    EXPECT(TXL_ERR_MISALIGNED, txl_model_get_info(model, (txl_model_info *)(void *)(unaligned.bytes + 1)));
    EXPECT(TXL_ERR_OVERLAP, txl_model_get_info(model, (txl_model_info *)(uintptr_t)model));
    EXPECT(TXL_ERR_OVERLAP, txl_model_default_options(model, (txl_options *)(uintptr_t)model));
    EXPECT(TXL_ERR_OVERLAP, txl_arena_bytes(model, &options, (size_t *)(uintptr_t)model));
    EXPECT(TXL_ERR_NULL, txl_model_default_options(NULL, &options));
    EXPECT(TXL_ERR_NULL, txl_model_default_options(model, NULL));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_model_default_options(&empty_model, &options));
    EXPECT(TXL_ERR_NULL, txl_arena_bytes(NULL, &options, &len));
    EXPECT(TXL_ERR_NULL, txl_arena_bytes(model, NULL, &len));
    EXPECT(TXL_ERR_NULL, txl_arena_bytes(model, &options, NULL));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_arena_bytes(&empty_model, &options, &len));
    EXPECT(TXL_ERR_NULL, txl_state_bytes(NULL, &options, &len));
    EXPECT(TXL_ERR_NULL, txl_state_bytes(model, NULL, &len));
    EXPECT(TXL_ERR_NULL, txl_state_bytes(model, &options, NULL));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_state_bytes(&empty_model, &options, &len));

    /* options no session can have */
    options.tgt_len = 0;
    EXPECT(TXL_ERR_BAD_OPTIONS, txl_arena_bytes(model, &options, &len));
    options = *defaults;
    options.mem_dtype = 7;
    EXPECT(TXL_ERR_BAD_OPTIONS, txl_arena_bytes(model, &options, &len));
    EXPECT(TXL_ERR_BAD_OPTIONS, txl_state_bytes(model, &options, &len));
    options = *defaults;
    options.same_length = 2;
    EXPECT(TXL_ERR_BAD_OPTIONS, txl_arena_bytes(model, &options, &len));
    options = *defaults;
    options.mem_init = 2;
    EXPECT(TXL_ERR_BAD_OPTIONS, txl_arena_bytes(model, &options, &len));
    options = *defaults;
    options.position_keys = 3;
    EXPECT(TXL_ERR_BAD_OPTIONS, txl_arena_bytes(model, &options, &len));
    options = *defaults;
    options.tgt_len = UINT32_MAX;
    options.mem_len = UINT32_MAX;
    if (sizeof(size_t) == 4) {
        EXPECT(TXL_ERR_SIZE_OVERFLOW, txl_arena_bytes(model, &options, &len));
    }
    options = *defaults;

    /* session_init */
    arena = aligned(arena_bytes + 16);
    EXPECT(TXL_ERR_NULL, txl_session_init(NULL, model, arena, arena_bytes, &options));
    EXPECT(TXL_ERR_NULL, txl_session_init(&session, NULL, arena, arena_bytes, &options));
    EXPECT(TXL_ERR_NULL, txl_session_init(&session, model, NULL, arena_bytes, &options));
    EXPECT(TXL_ERR_NULL, txl_session_init(&session, model, arena, arena_bytes, NULL));
    EXPECT(TXL_ERR_MISALIGNED,
           txl_session_init((txl_session *)((uint8_t *)&session + 4), model, arena, arena_bytes, &options));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_session_init(&session, &empty_model, arena, arena_bytes, &options));
    EXPECT(TXL_ERR_ARENA_TOO_SMALL, txl_session_init(&session, model, arena, arena_bytes - 1, &options));
    EXPECT(TXL_ERR_ARENA_TOO_SMALL, txl_session_init(&session, model, arena, 0, &options));
    EXPECT(TXL_ERR_ARENA_MISALIGNED, txl_session_init(&session, model, arena + 8, arena_bytes, &options));
    EXPECT(TXL_ERR_SIZE_OVERFLOW, txl_session_init(&session, model, arena, SIZE_MAX, &options));
    options.tgt_len = 0;
    EXPECT(TXL_ERR_BAD_OPTIONS, txl_session_init(&session, model, arena, arena_bytes, &options));
    options = *defaults;
    /* the session's own storage inside its arena; the model's; the image */
    block = aligned(arena_bytes + sizeof(txl_session) + 16);
    EXPECT(TXL_ERR_OVERLAP, txl_session_init((txl_session *)(void *)block, model, block,
                                             arena_bytes + sizeof(txl_session), &options));
    free(block);
    EXPECT(TXL_ERR_OVERLAP, txl_session_init(&session, model, (void *)(uintptr_t)model, arena_bytes, &options));
    /* every failure left the session not set up */
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_session_reset(&session));

    OK(txl_session_init(&session, model, arena, arena_bytes, &options));
    row = malloc(sizeof(float) * (info.n_token + 1));
    CHECK(row != NULL);

    /* feed */
    EXPECT(TXL_ERR_NULL, txl_session_feed(NULL, ids, 1, NULL, 0));
    EXPECT(TXL_ERR_NULL, txl_session_feed(&session, NULL, 1, NULL, 0));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_session_feed(&empty_session, ids, 1, NULL, 0));
    EXPECT(TXL_ERR_MISALIGNED, txl_session_feed((txl_session *)((uint8_t *)&session + 4), ids, 1, NULL, 0));
    EXPECT(TXL_ERR_MISALIGNED, txl_session_feed(&session, (const uint32_t *)(void *)(unaligned.bytes + 1), 1, NULL, 0));
    EXPECT(TXL_ERR_MISALIGNED, txl_session_feed(&session, ids, 1, (float *)(void *)(unaligned.bytes + 1), info.n_token));
    EXPECT(TXL_ERR_EMPTY, txl_session_feed(&session, ids, 0, NULL, 0));
    EXPECT(TXL_ERR_SIZE_OVERFLOW, txl_session_feed(&session, ids, SIZE_MAX / 2, NULL, 0));
    EXPECT(TXL_ERR_BUFFER_TOO_SMALL, txl_session_feed(&session, ids, 1, row, info.n_token - 1));
    EXPECT(TXL_ERR_OVERLAP, txl_session_feed(&session, ids, 1, (float *)(void *)arena, info.n_token));
    EXPECT(TXL_ERR_OVERLAP, txl_session_feed(&session, (const uint32_t *)(void *)row, 1, row, info.n_token));
    EXPECT(TXL_ERR_OVERLAP, txl_session_feed(&session, (const uint32_t *)(void *)&session, 1, NULL, 0));
    bad_tokens[0] = ids[0];
    bad_tokens[1] = info.n_token;
    bad_tokens[2] = ids[1];
    EXPECT(TXL_ERR_TOKEN_OUT_OF_RANGE, txl_session_feed(&session, bad_tokens, 3, NULL, 0));

    /* score */
    EXPECT(TXL_ERR_NULL, txl_session_score(NULL, ids, 2, row, 1));
    EXPECT(TXL_ERR_NULL, txl_session_score(&session, NULL, 2, row, 1));
    EXPECT(TXL_ERR_NULL, txl_session_score(&session, ids, 2, NULL, 1));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_session_score(&empty_session, ids, 2, row, 1));
    EXPECT(TXL_ERR_MISALIGNED, txl_session_score(&session, ids, 2, (float *)(void *)(unaligned.bytes + 1), 1));
    EXPECT(TXL_ERR_EMPTY, txl_session_score(&session, ids, 0, row, 1));
    EXPECT(TXL_ERR_BUFFER_TOO_SMALL, txl_session_score(&session, ids, 3, row, 1));
    EXPECT(TXL_ERR_TOKEN_OUT_OF_RANGE, txl_session_score(&session, bad_tokens, 3, row, 2));
    EXPECT(TXL_ERR_OVERLAP, txl_session_score(&session, (const uint32_t *)(void *)row, 2, row, 1));
    EXPECT(TXL_ERR_OVERLAP, txl_session_score(&session, ids, 2, (float *)(void *)(arena + 64), 1));
    /* one token: nothing to score, nothing runs */
    OK(txl_session_score(&session, ids, 1, NULL, 0));

    /* the refusals above changed nothing: the memory is still empty (or mem_len zeros) */
    OK(txl_session_memory_len(&session, &len));
    CHECK(len == (options.mem_init == TXL_MEM_INIT_ZEROS ? options.mem_len : 0));

    /* the small functions */
    EXPECT(TXL_ERR_NULL, txl_session_reset(NULL));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_session_reset(&empty_session));
    EXPECT(TXL_ERR_NULL, txl_session_memory_len(NULL, &len));
    EXPECT(TXL_ERR_NULL, txl_session_memory_len(&session, NULL));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_session_memory_len(&empty_session, &len));
    EXPECT(TXL_ERR_OVERLAP, txl_session_memory_len(&session, (size_t *)(void *)arena));
    EXPECT(TXL_ERR_NULL, txl_session_state_bytes(NULL, &len));
    EXPECT(TXL_ERR_NULL, txl_session_state_bytes(&session, NULL));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_session_state_bytes(&empty_session, &len));
    EXPECT(TXL_ERR_OVERLAP, txl_session_state_bytes(&session, (size_t *)(void *)&session));
    EXPECT(TXL_ERR_NULL, txl_session_options(NULL, &options));
    EXPECT(TXL_ERR_NULL, txl_session_options(&session, NULL));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_session_options(&empty_session, &options));

    /* save and restore */
    state = aligned(state_bytes + 64);
    OK(txl_session_feed(&session, ids, n_ids < 40 ? n_ids : 40, NULL, 0));
    EXPECT(TXL_ERR_NULL, txl_session_save_state(NULL, state, state_bytes, &written));
    EXPECT(TXL_ERR_NULL, txl_session_save_state(&session, NULL, state_bytes, &written));
    EXPECT(TXL_ERR_NULL, txl_session_save_state(&session, state, state_bytes, NULL));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_session_save_state(&empty_session, state, state_bytes, &written));
    EXPECT(TXL_ERR_STATE_BUFFER_TOO_SMALL, txl_session_save_state(&session, state, 16, &written));
    EXPECT(TXL_ERR_OVERLAP, txl_session_save_state(&session, arena, state_bytes, &written));
    EXPECT(TXL_ERR_OVERLAP, txl_session_save_state(&session, state, state_bytes, (size_t *)(void *)state));
    OK(txl_session_save_state(&session, state, state_bytes, &written));
    CHECK(written > 0 && written <= state_bytes);
    EXPECT(TXL_ERR_NULL, txl_session_restore_state(NULL, state, written));
    EXPECT(TXL_ERR_NULL, txl_session_restore_state(&session, NULL, written));
    EXPECT(TXL_ERR_NOT_INITIALIZED, txl_session_restore_state(&empty_session, state, written));
    EXPECT(TXL_ERR_OVERLAP, txl_session_restore_state(&session, arena, written));
    EXPECT(TXL_ERR_STATE_TRUNCATED, txl_session_restore_state(&session, state, 10));
    EXPECT(TXL_ERR_STATE_TRUNCATED, txl_session_restore_state(&session, state, written - 1));
    state[0] ^= 1;
    EXPECT(TXL_ERR_STATE_INVALID, txl_session_restore_state(&session, state, written));
    state[0] ^= 1;
    state[written / 2] ^= 1;
    EXPECT(TXL_ERR_STATE_CHECKSUM, txl_session_restore_state(&session, state, written));
    state[written / 2] ^= 1;
    OK(txl_session_restore_state(&session, state, written));
    /* a session with other options refuses the state */
    options.mem_init = options.mem_init == TXL_MEM_INIT_ZEROS ? TXL_MEM_INIT_EMPTY : TXL_MEM_INIT_ZEROS;
    {
        txl_session other;
        OK(txl_session_init(&other, model, arena, arena_bytes, &options));
        EXPECT(TXL_ERR_STATE_OTHER_OPTIONS, txl_session_restore_state(&other, state, written));
    }
    options = *defaults;

    /* the sampler */
    {
        txl_sampler sampler;
        txl_sampler empty_sampler;
        uint32_t token;
        memset(&empty_sampler, 0, sizeof empty_sampler);
        EXPECT(TXL_ERR_NULL, txl_sampler_init(NULL, 1.0f, 1));
        EXPECT(TXL_ERR_BAD_ARGUMENT, txl_sampler_init(&sampler, (float)NAN, 1));
        EXPECT(TXL_ERR_NOT_INITIALIZED, txl_sample(&sampler, row, 2, &token));
        EXPECT(TXL_ERR_MISALIGNED, txl_sampler_init((txl_sampler *)(void *)(unaligned.bytes + 4), 1.0f, 1));
        OK(txl_sampler_init(&sampler, 1.0f, 1));
        EXPECT(TXL_ERR_NULL, txl_sample(NULL, row, 2, &token));
        EXPECT(TXL_ERR_NULL, txl_sample(&sampler, NULL, 2, &token));
        EXPECT(TXL_ERR_NULL, txl_sample(&sampler, row, 2, NULL));
        EXPECT(TXL_ERR_NOT_INITIALIZED, txl_sample(&empty_sampler, row, 2, &token));
        EXPECT(TXL_ERR_EMPTY, txl_sample(&sampler, row, 0, &token));
        EXPECT(TXL_ERR_MISALIGNED, txl_sample(&sampler, (const float *)(void *)(unaligned.bytes + 2), 2, &token));
        EXPECT(TXL_ERR_OVERLAP, txl_sample(&sampler, row, 2, (uint32_t *)(void *)row));
        EXPECT(TXL_ERR_OVERLAP, txl_sample(&sampler, (const float *)(void *)&sampler, 2, &token));
    }

    free(row);
    free(state);
    free(arena);
}

/* Scores the ids through a session of the image and checks the digest and the saved state against
 * `txl score`'s; streams them in pieces, feeds them, saves and restores, samples. */
static void run_model(const char *path, uint32_t expected_digest, const char *state_path,
                      const uint32_t *ids, size_t n_ids, int first) {
    size_t image_len, arena_bytes, state_bytes, written, expected_state_len, len, i, start;
    uint8_t *image = read_file(path, &image_len);
    uint8_t *expected_state = read_file(state_path, &expected_state_len);
    txl_model model;
    txl_model_info info;
    txl_options options, got;
    txl_session session;
    uint8_t *arena;
    uint8_t *state;
    float *scores, *streamed, *row;
    double sum = 0.0;
    uint32_t value;

    memset(&model, 0, sizeof model);
    if (first) {
        image_errors(image, image_len);
    }
    OK(txl_model_parse(&model, image, image_len));
    OK(txl_model_get_info(&model, &info));
    CHECK(info.image_bytes == image_len);
    OK(txl_model_default_options(&model, &options));
    CHECK(options.mem_dtype == (info.integer ? TXL_MEM_DTYPE_INT8 : TXL_MEM_DTYPE_F32));
    OK(txl_arena_bytes(&model, &options, &arena_bytes));
    OK(txl_state_bytes(&model, &options, &state_bytes));
    if (first) {
        session_errors(&model, &options, ids, n_ids);
    }

    arena = aligned(arena_bytes);
    state = aligned(state_bytes);
    scores = malloc(sizeof(float) * n_ids);
    streamed = malloc(sizeof(float) * n_ids);
    row = malloc(sizeof(float) * info.n_token);
    CHECK(scores && streamed && row);
    OK(txl_session_init(&session, &model, arena, arena_bytes, &options));
    OK(txl_session_options(&session, &got));
    CHECK(memcmp(&got, &options, sizeof got) == 0);
    OK(txl_session_state_bytes(&session, &len));
    CHECK(len == state_bytes);

    /* the whole text at once: txl score's digest and state */
    OK(txl_session_score(&session, ids, n_ids, scores, n_ids - 1));
    value = digest(scores, n_ids - 1);
    for (i = 0; i + 1 < n_ids; i++) {
        sum += scores[i];
    }
    printf("%s: tokens=%lu bits_per_token=%.6f digest=0x%08lx arena=%lu state=%lu\n", path,
           (unsigned long)n_ids, -sum / (double)(n_ids - 1) / log(2.0), (unsigned long)value,
           (unsigned long)arena_bytes, (unsigned long)state_bytes);
    CHECK(value == expected_digest);
    OK(txl_session_save_state(&session, state, state_bytes, &written));
    CHECK(written == expected_state_len);
    CHECK(memcmp(state, expected_state, written) == 0);
    OK(txl_session_memory_len(&session, &len));
    CHECK(len <= options.mem_len);

    /* the same text in pieces of tgt_len, each carrying its last token over: the same bits */
    OK(txl_session_reset(&session));
    for (start = 0; start + 1 < n_ids; start += options.tgt_len) {
        size_t piece = n_ids - start < options.tgt_len + 1 ? n_ids - start : options.tgt_len + 1;
        OK(txl_session_score(&session, ids + start, piece, streamed + start, piece - 1));
    }
    CHECK(memcmp(scores, streamed, sizeof(float) * (n_ids - 1)) == 0);

    /* feeding the first k tokens (whole segments): the row after them holds the score of token k */
    {
        size_t k = options.tgt_len * ((n_ids / 2) / options.tgt_len > 0 ? (n_ids / 2) / options.tgt_len : 1);
        CHECK(k + 1 < n_ids);
        OK(txl_session_reset(&session));
        OK(txl_session_feed(&session, ids, k, row, info.n_token));
        CHECK(memcmp(&row[ids[k]], &scores[k - 1], sizeof(float)) == 0);
        /* a refused call changes nothing: the rest then scores as in the whole text */
        EXPECT(TXL_ERR_TOKEN_OUT_OF_RANGE, txl_session_feed(&session, &info.n_token, 1, row, info.n_token));
        OK(txl_session_save_state(&session, state, state_bytes, &written));
        OK(txl_session_score(&session, ids + k, n_ids - k, streamed, n_ids));
        CHECK(memcmp(streamed, scores + k, sizeof(float) * (n_ids - k - 1)) == 0);
        /* restored to where it was saved, it scores the rest with the same bits again */
        memset(streamed, 0, sizeof(float) * n_ids);
        OK(txl_session_restore_state(&session, state, written));
        OK(txl_session_score(&session, ids + k, n_ids - k, streamed, n_ids));
        CHECK(memcmp(streamed, scores + k, sizeof(float) * (n_ids - k - 1)) == 0);
    }

    /* greedy sampling takes the most likely token; seeded sampling repeats itself */
    {
        txl_sampler a, b;
        uint32_t token, u, v, best = 0;
        OK(txl_session_feed(&session, ids, 3, row, info.n_token));
        for (i = 1; i < info.n_token; i++) {
            if (row[i] > row[best]) {
                best = (uint32_t)i;
            }
        }
        OK(txl_sampler_init(&a, 0.0f, 7));
        OK(txl_sample(&a, row, info.n_token, &token));
        CHECK(token == best);
        OK(txl_sampler_init(&a, 0.8f, 7));
        OK(txl_sampler_init(&b, 0.8f, 7));
        for (i = 0; i < 8; i++) {
            OK(txl_sample(&a, row, info.n_token, &u));
            OK(txl_sample(&b, row, info.n_token, &v));
            CHECK(u == v && u < info.n_token);
        }
    }

    /* an integer image runs with int8 memory only; a state of another image is refused */
    if (info.integer) {
        options.mem_dtype = TXL_MEM_DTYPE_F32;
        EXPECT(TXL_ERR_INTEGER_OPTIONS, txl_arena_bytes(&model, &options, &len));
        EXPECT(TXL_ERR_INTEGER_OPTIONS, txl_session_init(&session, &model, arena, arena_bytes, &options));
        options.mem_dtype = TXL_MEM_DTYPE_INT8;
        options.position_keys = TXL_POSITION_KEYS_FOLDED;
        EXPECT(TXL_ERR_INTEGER_OPTIONS, txl_state_bytes(&model, &options, &len));
        OK(txl_model_default_options(&model, &options));
        OK(txl_session_init(&session, &model, arena, arena_bytes, &options));
    }
    {
        /* a state whose image CRC (header bytes 12..15) is another's, its own CRC redone */
        uint8_t *other = copy_of(expected_state, expected_state_len);
        other[12] ^= 1;
        put_u32(other + expected_state_len - 4, crc32(other, expected_state_len - 4));
        EXPECT(TXL_ERR_STATE_OTHER_MODEL, txl_session_restore_state(&session, other, expected_state_len));
        free(other);
    }

    free(row);
    free(streamed);
    free(scores);
    free(state);
    free(arena);
    free(expected_state);
    free(image);
}

/* The whitespace-separated token ids in the file at path; their count in *n. */
static uint32_t *read_ids(const char *path, size_t *n) {
    size_t n_ids = 0, cap = 1024, text_len;
    uint32_t *ids = malloc(sizeof(uint32_t) * cap);
    uint8_t *text = read_file(path, &text_len);
    char *word;
    CHECK(ids != NULL);
    text = realloc(text, text_len + 1);
    CHECK(text != NULL);
    text[text_len] = '\0';
    for (word = strtok((char *)text, " \t\r\n"); word; word = strtok(NULL, " \t\r\n")) {
        if (n_ids == cap) {
            cap *= 2;
            ids = realloc(ids, sizeof(uint32_t) * cap);
            CHECK(ids != NULL);
        }
        ids[n_ids++] = (uint32_t)strtoul(word, NULL, 10);
    }
    free(text);
    CHECK(n_ids >= 8);
    *n = n_ids;
    return ids;
}

int main(int argc, char **argv) {
    int i, code;

    if (argc < 5 || (argc - 1) % 4 != 0) {
        fprintf(stderr, "usage: %s IMAGE IDS DIGEST STATE [IMAGE IDS DIGEST STATE]...\n", argv[0]);
        return 2;
    }
    CHECK(txl_api_version() == TXL_API_VERSION);

    /* every code has its own message; unknown codes have one too */
    for (code = TXL_OK; code <= TXL_ERR_INTERNAL; code++) {
        const char *message = txl_strerror(code);
        CHECK(message != NULL && message[0] != '\0');
        CHECK(code == TXL_OK || strcmp(message, txl_strerror(code - 1)) != 0);
    }
    CHECK(strcmp(txl_strerror(-1), "unknown status code") == 0);
    CHECK(strcmp(txl_strerror(TXL_ERR_INTERNAL + 1), "unknown status code") == 0);

    for (i = 1; i + 3 < argc; i += 4) {
        size_t n_ids;
        uint32_t *ids = read_ids(argv[i + 1], &n_ids);
        run_model(argv[i], (uint32_t)strtoul(argv[i + 2], NULL, 16), argv[i + 3], ids, n_ids, i == 1);
        free(ids);
    }
    printf("ok\n");
    return 0;
}
