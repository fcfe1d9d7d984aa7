/*
 * A C firmware that runs a model `txl export --c` wrote (exported/model.h, exported/model.c) with
 * the txl static library (libtxl.a, from capi/) alone.
 *
 * It scores exported/tokens.bin (one token id per byte, linked in by tokens.S) as `txl score`
 * does: in segments of the exported tgt_len, each segment's last row predicting the next
 * segment's first token, with a buffer of one segment, and prints one line over semihosting:
 * `score tokens=N bits_per_token=X digest=0xHHHHHHHH`. The digest (FNV-1a over the bits of every
 * log-probability) is `txl score --json`'s for the same image, tokens and options when the
 * log-probabilities are the same bits.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model.h"
#include "txl.h"

/* The text to score, one token id per byte (tokens.S). */
extern const uint8_t tokens[];
extern const uint8_t tokens_end[];

/* The session's arena: TXL_ARENA_BYTES, 16-byte aligned. */
TXL_ALIGN_16 static uint8_t arena[TXL_ARENA_BYTES];

/* One segment's tokens, and the token after it, and their log-probabilities. */
static uint32_t segment[TXL_TGT_LEN + 1];
static float log_probs[TXL_TGT_LEN];

/* Stops with the message of `code` unless it is TXL_OK. */
static void check(const char *what, int code) {
    if (code != TXL_OK) {
        printf("error: %s: %s (%d)\n", what, txl_strerror(code), code);
        exit(1);
    }
}

int main(void) {
    txl_model model;
    txl_session session;
    size_t n = (size_t)(tokens_end - tokens), start, i;
    uint32_t digest = 0x811c9dc5u; /* FNV-1a over the log-probabilities' little-endian bytes */
    double sum = 0.0;

    check("txl_api_version", txl_api_version() == TXL_API_VERSION ? TXL_OK : TXL_ERR_INTERNAL);
    check("txl_model_parse", txl_model_parse(&model, model_image, TXL_IMAGE_BYTES));
    check("txl_session_init", txl_session_init(&session, &model, arena, sizeof arena, &model_options));
    if (n < 2) {
        printf("error: need at least 2 tokens, got %u\n", (unsigned)n);
        return 1;
    }
    /* segment after segment, each carrying its last token over to the next as the first */
    for (start = 0; start + 1 < n; start += TXL_TGT_LEN) {
        size_t len = n - start < TXL_TGT_LEN + 1 ? n - start : TXL_TGT_LEN + 1;
        for (i = 0; i < len; i++) {
            segment[i] = tokens[start + i];
        }
        check("txl_session_score", txl_session_score(&session, segment, len, log_probs, TXL_TGT_LEN));
        for (i = 0; i + 1 < len; i++) {
            union {
                float f;
                uint32_t u;
            } bits;
            int b;
            bits.f = log_probs[i];
            for (b = 0; b < 4; b++) {
                digest = (digest ^ ((bits.u >> (8 * b)) & 0xffu)) * 0x01000193u;
            }
            sum += log_probs[i]; /* in order, as the host sums it */
        }
    }
    printf("score tokens=%u bits_per_token=%.6f digest=0x%08lx\n", (unsigned)n,
           -sum / (double)(n - 1) / 0.69314718055994530942, (unsigned long)digest);
    return 0;
}
