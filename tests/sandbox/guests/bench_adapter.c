/* A pass-through daemon adapter for benchmarks and tests: the payload is
 * u32 rank, rank x u32 dims, then FP32 data; the model is the request's `param.model`.
 * Output: output 0's raw bytes. One model load by name and one fused inference
 * (wasmgate.nn_infer_f32, what the SDK's wg_nn_infer_f32 calls) per request. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wasi_nn.h"

#define WG(n) __attribute__((import_module("wasmgate"), import_name(n)))
WG("set_output") int32_t wg_set_output(const void *ptr, uint32_t len);
WG("nn_infer_f32") int32_t wg_nn_infer_f32(uint32_t graph, const uint32_t *dims, uint32_t rank,
                                          const void *in, uint32_t in_len, void *out,
                                          uint32_t out_cap, uint32_t *written);
WG("meta") int32_t wg_meta(const char *key, uint32_t key_len, char *buf, uint32_t cap, uint32_t *written);

static uint8_t out[64 * 1024];

__attribute__((export_name("wasmgate_abi_version"))) int32_t abi_version(void) { return 1; }
__attribute__((export_name("wasmgate_alloc"))) void *wg_alloc(uint32_t n) { return malloc(n ? n : 1); }

static int32_t fail(const char *msg) {
    wg_set_output(msg, (uint32_t)strlen(msg));
    return 2;
}

__attribute__((export_name("wasmgate_handle"))) int32_t handle(const uint8_t *p, uint32_t len) {
    char model[64];
    uint32_t n = 0, rank, written = 0;
    if (len < 4) return fail("short payload");
    memcpy(&rank, p, 4);
    if (rank > 8 || len < 4 + 4 * rank) return fail("bad header");
    if (wg_meta("param.model", 11, model, sizeof model, &n)) return fail("no param.model");
    wasi_nn_graph g;
    if (wasi_nn_load_by_name(model, n, &g) ||
        wg_nn_infer_f32(g, (const uint32_t *)(p + 4), rank, p + 4 + 4 * rank,
                        len - 4 - 4 * rank, out, sizeof out, &written))
        return fail("wasi-nn failed");
    return wg_set_output(out, written) ? 2 : 0;
}
