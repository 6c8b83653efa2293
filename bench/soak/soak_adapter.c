/* The soak's adapter: one module, four behaviours chosen by the adapter's name (the
 * `adapter` meta key), so each bundle of the soak is the same code under another name.
 * Payload as tests/sandbox/guests/bench_adapter.c: u32 rank, rank x u32 dims, FP32 data;
 * the model is `param.model`; the answer is output 0's bytes.
 *   digits*  pass-through (one model load by name, one fused inference)
 *   events*  pass-through, then emit_event of the first 8 data bytes (the soak puts the
 *            request's sequence number in the first float: the subscriber counts them)
 *   edge*    pass-through, then request_fallback: the cloud answers when it is there
 *   slow*    spins until the daemon's deadline stops it (a tenant abusing its budget) */
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
WG("emit_event") int32_t wg_emit_event(const void *ptr, uint32_t len);
WG("request_fallback") void wg_request_fallback(const char *ptr, int32_t len);

static uint8_t out[64 * 1024];
static volatile uint32_t spin;

__attribute__((export_name("wasmgate_abi_version"))) int32_t abi_version(void) { return 1; }
__attribute__((export_name("wasmgate_alloc"))) void *wg_alloc(uint32_t n) { return malloc(n ? n : 1); }

static int32_t fail(const char *msg) {
    wg_set_output(msg, (uint32_t)strlen(msg));
    return 2;
}

static int starts(const char *name, uint32_t n, const char *prefix) {
    uint32_t k = (uint32_t)strlen(prefix);
    return n >= k && memcmp(name, prefix, k) == 0;
}

__attribute__((export_name("wasmgate_handle"))) int32_t handle(const uint8_t *p, uint32_t len) {
    char model[64], name[64];
    uint32_t n = 0, an = 0, rank, written = 0;
    if (wg_meta("adapter", 7, name, sizeof name, &an)) return fail("no adapter name");
    if (starts(name, an, "slow"))
        for (;;) spin++;
    if (len < 4) return fail("short payload");
    memcpy(&rank, p, 4);
    if (rank > 8 || len < 4 + 4 * rank) return fail("bad header");
    if (wg_meta("param.model", 11, model, sizeof model, &n)) return fail("no param.model");
    wasi_nn_graph g;
    const uint8_t *data = p + 4 + 4 * rank;
    uint32_t data_len = len - 4 - 4 * rank;
    if (wasi_nn_load_by_name(model, n, &g) ||
        wg_nn_infer_f32(g, (const uint32_t *)(p + 4), rank, data, data_len, out, sizeof out,
                        &written))
        return fail("wasi-nn failed");
    if (starts(name, an, "events") && data_len >= 8) wg_emit_event(data, 8);
    if (starts(name, an, "edge")) wg_request_fallback("soak", 4);
    return wg_set_output(out, written) ? 2 : 0;
}
