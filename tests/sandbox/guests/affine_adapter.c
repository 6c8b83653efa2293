/* A realistic daemon adapter (Guest ABI v1): 4 floats in, the "affine" model through
 * wasi-nn, 4 floats + request counter + client name out. Uses every wasmgate import and
 * WASI stdout, so tests can check isolation between concurrent requests. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wasi_nn.h"

#define WG(n) __attribute__((import_module("wasmgate"), import_name(n)))
WG("set_output") int32_t wg_set_output(const void *ptr, uint32_t len);
WG("log") void wg_log(int32_t level, const char *ptr, uint32_t len);
WG("request_fallback") void wg_request_fallback(const char *ptr, uint32_t len);
WG("meta") int32_t wg_meta(const char *key, uint32_t key_len, char *buf, uint32_t cap, uint32_t *written);
WG("emit_event") int32_t wg_emit_event(const void *ptr, uint32_t len);

static uint32_t requests; /* 1 on every request unless the instance is pooled */

__attribute__((export_name("wasmgate_abi_version"))) int32_t abi_version(void) { return 1; }
__attribute__((export_name("wasmgate_alloc"))) void *wg_alloc(uint32_t n) { return malloc(n ? n : 1); }

static int32_t fail(int32_t status, const char *msg) {
    wg_set_output(msg, (uint32_t)strlen(msg));
    return status;
}

__attribute__((export_name("wasmgate_handle"))) int32_t handle(const uint8_t *p, uint32_t len) {
    struct { float y[4]; uint32_t requests; char client[32]; } out = {0};
    requests++;
    if (len != 16) return fail(1, "payload must be 4 little-endian floats");
    wasi_nn_graph g;
    wasi_nn_context c;
    uint32_t dims[2] = {1, 4}, written = 0;
    wasi_nn_tensor t = {dims, 2, WASI_NN_TYPE_F32, p, len};
    if (wasi_nn_load_by_name("affine", 6, &g) || wasi_nn_init_execution_context(g, &c) ||
        wasi_nn_set_input(c, 0, &t) || wasi_nn_compute(c) ||
        wasi_nn_get_output(c, 0, (uint8_t *)out.y, sizeof out.y, &written) || written != 16)
        return fail(2, "wasi-nn failed");
    uint32_t n = 0;
    if (wg_meta("client", 6, out.client, sizeof out.client - 1, &n) != 0) strcpy(out.client, "anon");
    out.requests = requests;
    printf("client=%s requests=%u\n", out.client, (unsigned)requests);
    fflush(stdout);
    wg_log(1, out.client, (uint32_t)strlen(out.client));
    if (out.y[0] > 100.0f) wg_request_fallback("low confidence", 14);
    wg_emit_event(out.client, (uint32_t)strlen(out.client));
    wg_set_output(&out, sizeof out);
    return 0;
}
