/* nn_proxy: a daemon adapter (Guest ABI v1) that replays wasi-nn calls described in its
 * payload, so tests can drive every function with any arguments, good or bad.
 *
 * Payload (little-endian u32 words): nrel, nrel payload offsets of u32 words to which the
 * payload base is added (pointers inside structs), nops, then per op: fn, nargs,
 * nargs x (kind, value).
 * kind 0 = the value itself; kind 1 = payload base + value (a pointer into the payload,
 * where the host's out-values land). Output: nops errnos (u32) then the payload as the host
 * left it. fn ids: 0 load, 1 load_by_name, 2 init_execution_context, 3 set_input,
 * 4 compute, 5 get_output, 6 unload, 7 finalize_execution_context, 8 wasmgate.nn_infer_f32,
 * and WasmEdge's 9 load_by_name_with_config, 10 compute_single, 11 get_output_single,
 * 12 fini_single. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wasi_nn.h"

__attribute__((import_module("wasmgate"), import_name("set_output")))
int32_t wg_set_output(const void *ptr, uint32_t len);
__attribute__((import_module("wasmgate"), import_name("nn_infer_f32")))
int32_t wg_nn_infer_f32_raw(uint32_t graph, const uint32_t *dims, uint32_t rank, const void *in,
                            uint32_t in_len, void *out, uint32_t out_cap, uint32_t *written);

#define P(i) ((void *)(uintptr_t)(a[i]))

__attribute__((export_name("wasmgate_abi_version"))) int32_t abi_version(void) { return 1; }

__attribute__((export_name("wasmgate_alloc"))) void *wg_alloc(uint32_t n) {
    return malloc(n ? n : 1);
}

static int32_t call(uint32_t fn, const uint32_t *a) {
    switch (fn) {
    case 0: return wasi_nn_load(P(0), a[1], a[2], a[3], P(4));
    case 1: return wasi_nn_load_by_name(P(0), a[1], P(2));
    case 2: return wasi_nn_init_execution_context(a[0], P(1));
    case 3: return wasi_nn_set_input(a[0], a[1], P(2));
    case 4: return wasi_nn_compute(a[0]);
    case 5: return wasi_nn_get_output(a[0], a[1], P(2), a[3], P(4));
    case 6: return wasi_nn_unload(a[0]);
    case 7: return wasi_nn_finalize_execution_context(a[0]);
    case 8: return wg_nn_infer_f32_raw(a[0], P(1), a[2], P(3), a[4], P(5), a[6], P(7));
    case 9: return wasi_nn_load_by_name_with_config(P(0), a[1], P(2), a[3], P(4));
    case 10: return wasi_nn_compute_single(a[0]);
    case 11: return wasi_nn_get_output_single(a[0], a[1], P(2), a[3], P(4));
    case 12: return wasi_nn_fini_single(a[0]);
    default: return -1;
    }
}

__attribute__((export_name("wasmgate_handle"))) int32_t handle(uint8_t *p, uint32_t len) {
    uint32_t *w = (uint32_t *)p;
    uint32_t nrel = w[0], pos = 1;
    for (uint32_t i = 0; i < nrel; i++, pos++) *(uint32_t *)(p + w[pos]) += (uint32_t)(uintptr_t)p;
    uint32_t nops = w[pos++];
    uint32_t *out = malloc(4 * nops + len);
    for (uint32_t op = 0; op < nops; op++) {
        uint32_t fn = w[pos], nargs = w[pos + 1], a[8] = {0};
        pos += 2;
        for (uint32_t i = 0; i < nargs && i < 8; i++, pos += 2)
            a[i] = w[pos] == 1 ? (uint32_t)(uintptr_t)p + w[pos + 1] : w[pos + 1];
        out[op] = (uint32_t)call(fn, a);
    }
    memcpy(out + nops, p, len);
    return wg_set_output(out, 4 * nops + len) ? 2 : 0;
}
