/*
 * The files `txl export --c` writes, used from C++ (tools/tests/capi.rs compiles model.c as C99 and
 * this as C++11, and links them with the host's libtxl.a): include/txl.h's and model.h's
 * `extern "C"` guards, and the exported sizes and options are the library's for the image.
 * Prints "exported ok".
 */
#include <cstdio>
#include <cstring>

#include "model.h"
#include "txl.h"

TXL_ALIGN_16 static uint8_t arena[TXL_ARENA_BYTES];
static float row[TXL_N_TOKEN];

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);          \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main() {
    txl_model model;
    txl_session session;
    txl_model_info info;
    txl_options options = TXL_OPTIONS_INIT;
    size_t bytes = 0;
    const uint32_t tokens[3] = {1, 2, 3};

    CHECK(std::memcmp(&options, &model_options, sizeof options) == 0);
    CHECK(txl_model_parse(&model, model_image, TXL_IMAGE_BYTES) == TXL_OK);
    CHECK(txl_model_get_info(&model, &info) == TXL_OK);
    CHECK(info.n_token == TXL_N_TOKEN && info.image_bytes == TXL_IMAGE_BYTES);
    CHECK(options.tgt_len == TXL_TGT_LEN);
    CHECK(txl_arena_bytes(&model, &model_options, &bytes) == TXL_OK && bytes == TXL_ARENA_BYTES);
    CHECK(txl_state_bytes(&model, &model_options, &bytes) == TXL_OK && bytes == TXL_STATE_BYTES);
    CHECK(txl_session_init(&session, &model, arena, sizeof arena, &model_options) == TXL_OK);
    CHECK(txl_session_feed(&session, tokens, 3, row, TXL_N_TOKEN) == TXL_OK);
    std::printf("exported ok\n");
    return 0;
}
