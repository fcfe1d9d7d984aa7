/*
 * txl.h: the C API of txl, Transformer-XL language models on microcontrollers.
 *
 * The library (libtxl.a, built from capi/) allocates nothing: the caller owns the model image
 * (read in place, e.g. from flash), the txl_model, txl_session and txl_sampler structs (fixed
 * sizes, below), the arena a session works in (txl_arena_bytes, 16-byte aligned) and every
 * buffer that takes results. The image and the arena must outlive the session that uses them.
 *
 * Every function returns TXL_OK (0) or a TXL_ERR_* code, and checks each pointer (NULL,
 * alignment), each struct (set up by its function), each length and that the buffers of one
 * call do not overlap, before it reads or writes anything: such a refusal changes nothing. A
 * setup function (txl_model_parse, txl_session_init, txl_sampler_init) that refuses what it was
 * given past those checks (an image, options, an arena, a temperature) leaves its struct not set
 * up. txl_strerror gives each code's message. What the library cannot check is that a pointer and
 * its length name memory the caller owns.
 *
 * C99 and C++. docs/C.md: building, linking, a minimal main. Matches capi/src
 * (tools/tests/capi_header.rs compares the two).
 */
#ifndef TXL_H
#define TXL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this API; txl_api_version() returns the library's. */
#define TXL_API_VERSION 1

/* Sizes of the structs the caller provides, in uint64_t words (they depend on the width of a
 * pointer). */
#if UINTPTR_MAX > 0xFFFFFFFFu
#define TXL_MODEL_WORDS 96
#define TXL_SESSION_WORDS 160
#else
#define TXL_MODEL_WORDS 64
#define TXL_SESSION_WORDS 96
#endif
#define TXL_SAMPLER_WORDS 6

/* Aligns a variable to 16 bytes, as an image and an arena must be:
 *     TXL_ALIGN_16 static uint8_t arena[TXL_ARENA_BYTES];
 * (first in the declaration, as C++ needs it). Define it before including txl.h for a compiler
 * that has none of these. */
#ifndef TXL_ALIGN_16
#if defined(__cplusplus) && __cplusplus >= 201103L
#define TXL_ALIGN_16 alignas(16)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define TXL_ALIGN_16 _Alignas(16)
#elif defined(__GNUC__) || defined(__clang__)
#define TXL_ALIGN_16 __attribute__((aligned(16)))
#endif
#endif

/* What each function returns. */
enum txl_status {
    TXL_OK = 0,                         /* success */
    TXL_ERR_NULL = 1,                   /* a pointer the function needs is NULL */
    TXL_ERR_MISALIGNED = 2,             /* a pointer is not aligned for its type */
    TXL_ERR_NOT_INITIALIZED = 3,        /* a txl_model, txl_session or txl_sampler not set up */
    TXL_ERR_OVERLAP = 4,                /* buffers of one call overlap */
    TXL_ERR_EMPTY = 5,                  /* no tokens, or no log-probabilities to sample from */
    TXL_ERR_BUFFER_TOO_SMALL = 6,       /* an output buffer is too short */
    TXL_ERR_BAD_ARGUMENT = 7,           /* an argument out of range (a NaN temperature) */
    TXL_ERR_IMAGE_TRUNCATED = 8,        /* the image is shorter than it declares */
    TXL_ERR_IMAGE_BAD_MAGIC = 9,        /* not a txl model image */
    TXL_ERR_IMAGE_VERSION = 10,         /* an image format version this library does not read */
    TXL_ERR_IMAGE_CHECKSUM = 11,        /* the image's CRC-32 does not match (corrupt image) */
    TXL_ERR_IMAGE_INVALID = 12,         /* header, config, tensors, vocabulary or integer parameters */
    TXL_ERR_IMAGE_MISALIGNED = 13,      /* the image does not start on a 16-byte boundary */
    TXL_ERR_BAD_OPTIONS = 14,           /* session options that cannot work (tgt_len 0, unknown value) */
    TXL_ERR_INTEGER_OPTIONS = 15,       /* an integer image needs int8 memory, keys per session or segment */
    TXL_ERR_ARENA_TOO_SMALL = 16,       /* the arena is smaller than txl_arena_bytes */
    TXL_ERR_ARENA_MISALIGNED = 17,      /* the arena does not start on a 16-byte boundary */
    TXL_ERR_SIZE_OVERFLOW = 18,         /* a size overflows the address space */
    TXL_ERR_TOKEN_OUT_OF_RANGE = 19,    /* a token id not below n_token */
    TXL_ERR_STATE_BUFFER_TOO_SMALL = 20,/* the buffer for a state is shorter than the state */
    TXL_ERR_STATE_TRUNCATED = 21,       /* a state shorter than it declares */
    TXL_ERR_STATE_INVALID = 22,         /* not a session state of this format (magic, version, header) */
    TXL_ERR_STATE_CHECKSUM = 23,        /* a state's CRC-32 does not match (damaged state) */
    TXL_ERR_STATE_OTHER_MODEL = 24,     /* a state saved by a session of another image */
    TXL_ERR_STATE_OTHER_OPTIONS = 25,   /* a state saved by a session with other options */
    TXL_ERR_INTERNAL = 26               /* an error of the core no code above names (none known) */
};

/* txl_options.mem_init: how the memory starts (and restarts after txl_session_reset). */
enum txl_mem_init {
    TXL_MEM_INIT_EMPTY = 0, /* no memory (the original code's) */
    TXL_MEM_INIT_ZEROS = 1  /* mem_len all-zero hidden states (Hugging Face's) */
};

/* txl_options.mem_dtype: how the cached keys and values are stored. */
enum txl_mem_dtype {
    TXL_MEM_DTYPE_F32 = 0,
    TXL_MEM_DTYPE_F16 = 1,
    TXL_MEM_DTYPE_INT8 = 2 /* a scale per position and head; integer images need it */
};

/* txl_options.position_keys: where the attention's position term comes from. */
enum txl_position_keys {
    TXL_POSITION_KEYS_SESSION = 0, /* a table per layer, computed once per session */
    TXL_POSITION_KEYS_SEGMENT = 1, /* one table, recomputed per layer and segment */
    TXL_POSITION_KEYS_FOLDED = 2   /* none: W_r folded into the queries (float images only) */
};

/* The options of a session. txl_model_default_options gives a model's defaults; `txl export
 * --c` writes the options it was given as TXL_OPTIONS_INIT. */
typedef struct txl_options {
    uint32_t tgt_len;       /* longest segment run at once (sizes the activations), at least 1 */
    uint32_t mem_len;       /* positions remembered between segments */
    uint32_t clamp_len;     /* largest relative distance with its own embedding; 0: no clamping */
    uint32_t same_length;   /* 1: every query attends to the same number of keys; 0: not */
    uint32_t mem_init;      /* enum txl_mem_init */
    uint32_t mem_dtype;     /* enum txl_mem_dtype */
    uint32_t position_keys; /* enum txl_position_keys */
} txl_options;

/* What a model is. */
typedef struct txl_model_info {
    uint32_t n_token;  /* vocabulary size: token ids 0..n_token-1, rows of n_token floats */
    uint32_t n_layer;  /* decoder layers */
    uint32_t d_model;  /* residual width */
    uint32_t n_head;   /* attention heads */
    uint32_t d_head;   /* width of one head */
    uint32_t d_inner;  /* feed-forward width */
    uint32_t integer;  /* 1: an integer image (activations in fixed point); 0: float */
    size_t image_bytes; /* bytes of the image */
} txl_model_info;

/* A parsed model, a session, a sampler: storage for the library, set up by txl_model_parse,
 * txl_session_init and txl_sampler_init. Declare them anywhere (a static, the stack); do not
 * copy one that is in use. */
typedef struct txl_model { uint64_t opaque[TXL_MODEL_WORDS]; } txl_model;
typedef struct txl_session { uint64_t opaque[TXL_SESSION_WORDS]; } txl_session;
typedef struct txl_sampler { uint64_t opaque[TXL_SAMPLER_WORDS]; } txl_sampler;

/* The version of the API the library implements: TXL_API_VERSION of its header. */
uint32_t txl_api_version(void);

/* A message for a status code: a NUL-terminated string with static storage, never NULL ("unknown
 * status code" for a code that is none of the above). */
const char *txl_strerror(int code);

/* Parses the model image of image_bytes bytes at image (16-byte aligned) into model, checking
 * everything about it once (its CRC-32 included). Nothing is copied: the image must stay, unchanged,
 * while the model or a session of it is used. A pointer refused changes nothing; an image refused
 * leaves model not set up. */
int txl_model_parse(txl_model *model, const void *image, size_t image_bytes);

/* Writes what model is to info. */
int txl_model_get_info(const txl_model *model, txl_model_info *info);

/* Writes to options the options `txl score` runs model with when given none: the model's
 * tgt_len, mem_len, clamp_len and same_length, TXL_MEM_INIT_EMPTY, TXL_POSITION_KEYS_SESSION, and
 * TXL_MEM_DTYPE_F32 (TXL_MEM_DTYPE_INT8 for an integer image). */
int txl_model_default_options(const txl_model *model, txl_options *options);

/* Writes to bytes the exact size of the arena a session of model with options needs. */
int txl_arena_bytes(const txl_model *model, const txl_options *options, size_t *bytes);

/* Writes to bytes the most bytes txl_session_save_state writes for a session of model with
 * options (a full memory): the size of a buffer, or a flash region, that keeps the state. */
int txl_state_bytes(const txl_model *model, const txl_options *options, size_t *bytes);

/* Starts a session of model with options in session, its memory, activations and scratch in the
 * arena of arena_bytes bytes at arena (16-byte aligned, at least txl_arena_bytes). The session
 * keeps its own copy of the parsed model (model may go afterwards); the image and the arena must
 * stay while the session is used. A pointer refused changes nothing; any other failure leaves
 * session not set up. */
int txl_session_init(txl_session *session, const txl_model *model, void *arena, size_t arena_bytes,
                     const txl_options *options);

/* Runs n_tokens tokens (any number, at least 1) through the session, in segments of its tgt_len
 * from the first; the memory then holds the last mem_len positions. Where next_log_probs is not
 * NULL, writes to it the log-probabilities of the token after the last: entry t is
 * ln p(t | everything fed so far), and n_log_probs must be at least n_token. Every token is
 * checked before anything runs: on an error the session is as it was. */
int txl_session_feed(txl_session *session, const uint32_t *tokens, size_t n_tokens,
                     float *next_log_probs, size_t n_log_probs);

/* Scores a text: runs tokens[0 .. n_tokens-2] through the session in segments of its tgt_len from
 * the first, and writes log_probs[i] = ln p(tokens[i+1] | tokens[0..i] and the memory) for each i
 * below n_tokens - 1 (n_log_probs must be at least that). The last token is scored, not run: to go
 * on with the text, start the next call with it. These are `txl score`'s bits for the same text and
 * options when every call but the last scores a multiple of tgt_len tokens after the one carried
 * over. With one token nothing runs and log_probs may be NULL. Every token is checked before
 * anything runs: on an error the session is as it was. */
int txl_session_score(txl_session *session, const uint32_t *tokens, size_t n_tokens, float *log_probs,
                      size_t n_log_probs);

/* Forgets the memory: the session starts again as its mem_init says. */
int txl_session_reset(txl_session *session);

/* Writes the session's state (its memory, what it is valid for, a CRC-32) to the state_bytes bytes
 * at state, and the bytes written to *written: at most txl_state_bytes, fewer while the memory is
 * not full. The session is not changed. */
int txl_session_save_state(const txl_session *session, void *state, size_t state_bytes, size_t *written);

/* Replaces the session's memory with a state txl_session_save_state wrote (state_bytes bytes at
 * state; longer is fine). A state of another image or other options, or a damaged one, is refused
 * with its code, and the session is as it was. Afterwards the session continues bit for bit as the
 * one that saved it. */
int txl_session_restore_state(txl_session *session, const void *state, size_t state_bytes);

/* Writes to bytes the most bytes txl_session_save_state writes for this session. */
int txl_session_state_bytes(const txl_session *session, size_t *bytes);

/* Writes to positions the positions the session remembers now (at most its mem_len). */
int txl_session_memory_len(const txl_session *session, size_t *positions);

/* Writes the session's options to options. */
int txl_session_options(const txl_session *session, txl_options *options);

/* Sets up sampler: with temperature above 0 it samples from p^(1/temperature) with a generator
 * seeded by seed (the core's sampler, as `txl generate --temperature T --seed S`); with 0 or below it
 * takes the most likely token. A NaN temperature is refused (TXL_ERR_BAD_ARGUMENT). */
int txl_sampler_init(txl_sampler *sampler, float temperature, uint64_t seed);

/* Picks the next token from n_log_probs log-probabilities (a row txl_session_feed wrote) and
 * writes it to token. */
int txl_sample(txl_sampler *sampler, const float *log_probs, size_t n_log_probs, uint32_t *token);

#ifdef __cplusplus
}
#endif

#endif /* TXL_H */
