/*
 * probe — a test adapter whose behaviour the payload's first byte chooses.
 *
 *   'M' (or empty) run model "double" (y = 2x) on [1,2,3,4]; answer "<tag>:2,4,6,8"
 *   'P'            echo: "<tag>:" + rest of the payload
 *   'B'            status 1 (bad input) "bad probe input"
 *   'E'            status 2 (adapter error) "probe failed"
 *   'T'            trap (unreachable)
 *   'L'            loop forever (deadline)
 *   'W<n>'         spin n million iterations, then answer like 'P'
 *   'F'            ask for fallback ("low confidence"), answer "<tag>:local"
 *   'V'            emit event "ev", answer like 'P'
 *   'X'            emit the rest of the payload as an event, answer like 'P'
 *   'G'            log the rest of the payload (wg_log, level 1), answer like 'P'
 * <tag> is the bundle param "tag" (default "none"), so each test bundle version differs.
 * With the bundle param "broken" set, every request fails with status 2 (a bad release).
 */
#include "wasmgate.h"

static int reply_tagged(const uint8_t *rest, size_t n) {
    char tag[32], out[512];
    if (wg_param_str("tag", tag, sizeof tag) < 0) strcpy(tag, "none");
    size_t t = strlen(tag);
    if (n > sizeof out - t - 2) n = sizeof out - t - 2;
    memcpy(out, tag, t);
    out[t] = ':';
    memcpy(out + t + 1, rest, n);
    return wg_reply(out, t + 1 + n);
}

static volatile unsigned long sink;

static int run_model(void) {
    wasi_nn_graph g;
    static const uint32_t dims[2] = {1, 4};
    float in[4] = {1, 2, 3, 4}, out[4];
    size_t n_out = 0;
    int e = wg_nn_load("double", &g);
    if (e == 0) e = wg_nn_infer_f32(g, dims, 2, in, 4, out, 4, &n_out);
    if (e != 0 || n_out != 4) return wg_fail(WG_ADAPTER_ERROR, "model double failed");
    char text[64];
    int len = snprintf(text, sizeof text, "%d,%d,%d,%d", (int)out[0], (int)out[1], (int)out[2], (int)out[3]);
    return reply_tagged((const uint8_t *)text, (size_t)len);
}

static int handle(const uint8_t *p, size_t n) {
    char broken[8];
    if (wg_param_str("broken", broken, sizeof broken) >= 0) return wg_fail(WG_ADAPTER_ERROR, "broken release");
    char c = n ? (char)p[0] : 'M';
    switch (c) {
    case 'M': return run_model();
    case 'P': return reply_tagged(p + 1, n - 1);
    case 'B': return wg_fail(WG_BAD_INPUT, "bad probe input");
    case 'E': return wg_fail(WG_ADAPTER_ERROR, "probe failed");
    case 'T': __builtin_trap();
    case 'L': for (;;) sink++;
    case 'W': {
        unsigned long m = 0;
        for (size_t i = 1; i < n && p[i] >= '0' && p[i] <= '9'; i++) m = m * 10 + (p[i] - '0');
        for (unsigned long i = 0; i < m * 1000000UL; i++) sink += i;
        return reply_tagged(p + 1, n - 1);
    }
    case 'F':
        wg_fallback("low confidence");
        return reply_tagged((const uint8_t *)"local", 5);
    case 'V':
        wg_emit("ev", 2);
        return reply_tagged(p + 1, n - 1);
    case 'X':
        wg_emit(p + 1, n - 1);
        return reply_tagged(p + 1, n - 1);
    case 'G': {
        static char line[1024];
        size_t len = n - 1 < sizeof line - 1 ? n - 1 : sizeof line - 1;
        memcpy(line, p + 1, len);
        line[len] = 0;
        wg_log(1, line);
        return reply_tagged(p + 1, n - 1);
    }
    default: return wg_fail(WG_BAD_INPUT, "unknown probe command");
    }
}

WASMGATE_ADAPTER(handle)
