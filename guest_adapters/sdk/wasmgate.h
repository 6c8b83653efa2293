/*
 * wasmgate.h — the wasmgate guest SDK (header-only, C11, wasm32-wasi reactor).
 *
 * An adapter is one function:
 *
 *     #include "wasmgate.h"
 *
 *     static int handle(const uint8_t *payload, size_t len) {
 *         ...turn payload into tensors, call the model, write an answer...
 *         return wg_reply_text("{\"ok\":true}");
 *     }
 *     WASMGATE_ADAPTER(handle)
 *
 * Build it with `wasmgate adapter build adapter.c --out adapter.wasm`.
 *
 * ---------------------------------------------------------------------------------------
 * Guest ABI v1 (the daemon's side lives in wasmgate.sandbox; keep the two in step)
 *
 * Exports (WASMGATE_ADAPTER defines all three; the linker exports `memory` itself):
 *   wasmgate_abi_version() -> i32          always 1
 *   wasmgate_alloc(size) -> ptr            `size` writable bytes for the payload, 0 on failure
 *   wasmgate_handle(ptr, len) -> status    0 ok, 1 bad input (client's fault, HTTP 400),
 *                                          2 adapter error (local failure, may fall back)
 *   _initialize()                          WASI reactor start, called once by the host
 * For status 0 the answer is the bytes last passed to set_output; for 1 and 2 those bytes
 * are the error message.
 *
 * Imports from module "wasmgate" (declared below as wasmgate_*):
 *   set_output(ptr, len) -> i32            0 ok, 1 too large (manifest limits.max_output_bytes)
 *   log(level, ptr, len)                   0 debug, 1 info, 2 warn, 3 error; capped per request
 *   request_fallback(ptr, len)             ask the daemon to answer from the cloud instead
 *   meta(key, key_len, buf, cap, written*) -> i32   0 ok, 1 unknown key, 2 buffer too small
 *                                          keys: adapter content_type transport topic client
 *                                          param.<name> (the manifest's [params])
 *   emit_event(ptr, len) -> i32            publish to events/<adapter> (MQTT) if a bridge has one
 *   nn_infer_f32(graph, dims*, rank, in*, in_len, out*, out_cap, written*) -> wasi-nn errno
 *                                          FP32 input 0 in, output 0's bytes out, one host
 *                                          call (wg_nn_infer_f32); optional import
 *   state_get(key*, key_len, buf*, cap, written*) -> i32    import set "state" v1 (optional,
 *   state_set(key*, key_len, val*, val_len, ttl_ms) -> i32  wasmgate >= 0.2): the adapter's
 *   state_delete(key*, key_len) -> i32                      key-value store, persisted across
 *                                          requests and restarts, granted by [state] max_bytes,
 *                                          max_keys in bundle.toml; ttl_ms 0 = no expiry.
 *                                          Returns WG_STATE_* (below); written = value size
 * Plus "wasi_ephemeral_nn" (models declared in bundle.toml, loaded by name) and a restricted
 * "wasi_snapshot_preview1" (no files, no env, no network; stdout/stderr go to the log).
 *
 * Every instance is fresh per request: globals start zeroed each time, nothing leaks
 * between requests, and memory is released when the request ends. What must outlive a
 * request goes into the state store (state_*).
 * ---------------------------------------------------------------------------------------
 *
 * Helper layer (all functions are `static`, prefixed wg_, bounded, no recursion):
 *   replies     wg_reply / wg_reply_text / wg_fail
 *   host        wg_log / wg_fallback / wg_emit / wg_meta / wg_param_double / wg_param_str
 *   JSON read   wg_json_document / wg_json_get / wg_json_floats / wg_json_string_copy
 *   JSON write  wg_writer_init / wg_json_begin|end / wg_json_key_{str,num,float,int,bool} /
 *               wg_writer_reply
 *   math        wg_softmax / wg_argmax / wg_quantize_i8|u8 / wg_dequantize_i8|u8
 *   models      wg_nn_load / wg_nn_infer_f32 / wg_nn_strerror (+ raw wasi-nn below)
 *   state       wg_state_get / wg_state_set / wg_state_delete / wg_state_get_floats /
 *               wg_state_set_floats / wg_moving_average / wg_state_strerror
 */
#ifndef WASMGATE_H
#define WASMGATE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wasi_nn.h" /* wasi_ephemeral_nn imports, types and enums (sandbox-owned) */

#define WASMGATE_ABI_VERSION 1

/* Status codes returned by a handler. */
#define WG_OK 0
#define WG_BAD_INPUT 1
#define WG_ADAPTER_ERROR 2

/* Log levels. */
#define WG_DEBUG 0
#define WG_INFO 1
#define WG_WARN 2
#define WG_ERROR 3

#define WG_UNUSED __attribute__((unused))

/* ---- host imports: module "wasmgate" ------------------------------------------------ */

#define WG_IMPORT(n) __attribute__((import_module("wasmgate"), import_name(n)))
WG_IMPORT("set_output") int32_t wasmgate_set_output(const void *ptr, int32_t len);
WG_IMPORT("log") void wasmgate_log(int32_t level, const char *ptr, int32_t len);
WG_IMPORT("request_fallback") void wasmgate_request_fallback(const char *ptr, int32_t len);
WG_IMPORT("meta")
int32_t wasmgate_meta(const char *key, int32_t key_len, char *buf, int32_t cap, int32_t *written);
WG_IMPORT("emit_event") int32_t wasmgate_emit_event(const void *ptr, int32_t len);

/* ---- exports: one macro makes the adapter ------------------------------------------- */

typedef int (*wg_handler)(const uint8_t *payload, size_t len);

static WG_UNUSED int wg__dispatch(wg_handler fn, int32_t ptr, int32_t len) {
    static const uint8_t empty[1] = {0};
    if (len < 0 || (ptr == 0 && len > 0)) {
        static const char msg[] = "wasmgate_handle: invalid payload pointer or length";
        wasmgate_set_output(msg, (int32_t)(sizeof msg - 1));
        return WG_ADAPTER_ERROR;
    }
    const uint8_t *payload = ptr ? (const uint8_t *)(uintptr_t)ptr : empty;
    int status = fn(payload, (size_t)len);
    /* Free the payload so a pooled (reused) instance does not grow per request. */
    if (ptr) free((void *)(uintptr_t)ptr);
    return status;
}

/* Defines the three exports around `fn`; use it exactly once per adapter. */
#define WASMGATE_ADAPTER(fn)                                                                 \
    __attribute__((export_name("wasmgate_abi_version"))) int32_t wasmgate_abi_version(void) { \
        return WASMGATE_ABI_VERSION;                                                         \
    }                                                                                        \
    __attribute__((export_name("wasmgate_alloc"))) int32_t wasmgate_alloc(int32_t size) {    \
        if (size < 0) return 0;                                                              \
        return (int32_t)(uintptr_t)malloc(size ? (size_t)size : 1);                          \
    }                                                                                        \
    __attribute__((export_name("wasmgate_handle"))) int32_t wasmgate_handle(int32_t p,       \
                                                                            int32_t n) {     \
        return wg__dispatch(fn, p, n);                                                       \
    }

/* ---- replies and host helpers -------------------------------------------------------- */

/* Set the answer (or, for a non-zero status, the error message). Returns WG_OK, or
 * WG_ADAPTER_ERROR if the host refused it as too large. */
static WG_UNUSED int wg_reply(const void *data, size_t len) {
    if (len > INT32_MAX) return WG_ADAPTER_ERROR;
    return wasmgate_set_output(data, (int32_t)len) == 0 ? WG_OK : WG_ADAPTER_ERROR;
}

static WG_UNUSED int wg_reply_text(const char *text) { return wg_reply(text, strlen(text)); }

/* Return `status` with `message` as the error text: `return wg_fail(WG_BAD_INPUT, "...")`. */
static WG_UNUSED int wg_fail(int status, const char *message) {
    wg_reply_text(message);
    return status;
}

/* strlen with an upper bound, so a missing terminator cannot run off the end of memory. */
static size_t wg__strlen(const char *s, size_t max) {
    size_t n = 0;
    while (n < max && s[n]) n++;
    return n;
}

static WG_UNUSED void wg_log(int level, const char *message) {
    wasmgate_log(level, message, (int32_t)wg__strlen(message, 4096));
}

/* Ask for cloud fallback with a short reason ("low confidence"); still reply locally —
 * the local answer is used when the manifest or the daemon does not allow fallback. */
static WG_UNUSED void wg_fallback(const char *reason) {
    wasmgate_request_fallback(reason, (int32_t)wg__strlen(reason, 256));
}

static WG_UNUSED int wg_emit(const void *data, size_t len) {
    if (len > INT32_MAX) return -1;
    return wasmgate_emit_event(data, (int32_t)len);
}

/* Copy request metadata `key` into buf as a NUL-terminated string.
 * Returns its length, -1 unknown key, -2 buffer too small. */
static WG_UNUSED int wg_meta(const char *key, char *buf, size_t cap) {
    if (cap == 0 || cap > INT32_MAX) return -2;
    int32_t written = 0;
    int32_t rc = wasmgate_meta(key, (int32_t)wg__strlen(key, 256), buf, (int32_t)(cap - 1), &written);
    if (rc == 1) return -1;
    if (rc != 0 || written < 0 || (size_t)written > cap - 1) return -2;
    buf[written] = '\0';
    return (int)written;
}

/* Read manifest param `name` ([params] in bundle.toml) as a string. Same returns as wg_meta. */
static WG_UNUSED int wg_param_str(const char *name, char *buf, size_t cap) {
    char key[128];
    int n = snprintf(key, sizeof key, "param.%s", name);
    if (n < 0 || (size_t)n >= sizeof key) return -1;
    return wg_meta(key, buf, cap);
}

static int wg__parse_number(const char *s, size_t len, size_t *pos, double *out);

/* Read a numeric param; `fallback` if it is absent. Returns 0 ok, -1 present but not a number. */
static WG_UNUSED int wg_param_double(const char *name, double fallback, double *out) {
    char buf[64];
    int n = wg_param_str(name, buf, sizeof buf);
    *out = fallback;
    if (n == -1) return 0;
    if (n < 0) return -1;
    size_t pos = 0;
    double v = 0;
    if (wg__parse_number(buf, (size_t)n, &pos, &v) != 0 || pos != (size_t)n) return -1;
    *out = v;
    return 0;
}

/* ---- JSON reading: a bounded subset parser ------------------------------------------- */
/* Accepts standard JSON. Values are views into the payload (nothing is copied). Arrays and
 * objects are fully validated when first parsed, with a fixed nesting limit
 * (WG_JSON_MAX_DEPTH) and never by recursion; numbers outside double range are refused.
 * Numbers with more than 15 significant digits may be off in the last place. */

#define WG_JSON_MAX_DEPTH 32

typedef enum {
    WG_JSON_NULL = 1,
    WG_JSON_BOOL,
    WG_JSON_NUMBER,
    WG_JSON_STRING,
    WG_JSON_ARRAY,
    WG_JSON_OBJECT
} wg_json_type;

typedef struct {
    wg_json_type type;
    const char *start; /* raw text: strings without quotes (escapes kept), composites with brackets */
    size_t len;
    double number;     /* WG_JSON_NUMBER */
    int boolean;       /* WG_JSON_BOOL */
} wg_json_value;

static void wg__ws(const char *s, size_t len, size_t *pos) {
    while (*pos < len && (s[*pos] == ' ' || s[*pos] == '\t' || s[*pos] == '\n' || s[*pos] == '\r'))
        (*pos)++;
}

static int wg__digit(char c) { return c >= '0' && c <= '9'; }

/* JSON number at *pos; no libc strtod because the payload is not NUL-terminated. */
static int wg__parse_number(const char *s, size_t len, size_t *pos, double *out) {
    size_t i = *pos;
    int neg = 0, exp = 0, exp_sign = 1, exp_val = 0, digits = 0;
    double mant = 0;
    if (i < len && s[i] == '-') { neg = 1; i++; }
    if (i >= len || !wg__digit(s[i])) return -1;
    for (; i < len && wg__digit(s[i]); i++, digits++) {
        if (digits < 18) mant = mant * 10 + (s[i] - '0'); else exp++;   /* keep precision bounded */
    }
    if (i < len && s[i] == '.') {
        i++;
        if (i >= len || !wg__digit(s[i])) return -1;
        for (; i < len && wg__digit(s[i]); i++, digits++) {
            if (digits < 18) { mant = mant * 10 + (s[i] - '0'); exp--; }
        }
    }
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-')) { exp_sign = s[i] == '-' ? -1 : 1; i++; }
        if (i >= len || !wg__digit(s[i])) return -1;
        for (; i < len && wg__digit(s[i]); i++) if (exp_val < 10000) exp_val = exp_val * 10 + (s[i] - '0');
    }
    exp += exp_sign * exp_val;
    if (exp > 400) exp = 400;
    if (exp < -400) exp = -400;
    /* Dividing by an exact power of ten keeps short decimals (0.1, 1764410000.125) correctly
     * rounded; multiplying by an inexact 1e-k would not. */
    double v = exp < 0 && exp >= -22 ? mant / pow(10.0, -exp) : mant * pow(10.0, exp);
    if (!isfinite(v)) return -1;
    *out = neg ? -v : v;
    *pos = i;
    return 0;
}

/* String starting at the opening quote; leaves *pos after the closing quote. */
static int wg__scan_string(const char *s, size_t len, size_t *pos) {
    size_t i = *pos + 1;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"') { *pos = i + 1; return 0; }
        if (c < 0x20) return -1;
        if (c == '\\') {
            if (i + 1 >= len) return -1;
            i += 2;
            continue;
        }
        i++;
    }
    return -1;
}

static int wg__literal(const char *s, size_t len, size_t i, const char *lit) {
    size_t n = strlen(lit);
    return len - i >= n && memcmp(s + i, lit, n) == 0;
}

/* A string, number or literal at *pos; leaves *pos after it. */
static int wg__scan_scalar(const char *s, size_t len, size_t *pos) {
    double ignored;
    char c = s[*pos];
    if (c == '"') return wg__scan_string(s, len, pos);
    if (wg__literal(s, len, *pos, "true") || wg__literal(s, len, *pos, "null")) { *pos += 4; return 0; }
    if (wg__literal(s, len, *pos, "false")) { *pos += 5; return 0; }
    return wg__parse_number(s, len, pos, &ignored);
}

/* Validate an array or object starting at *pos: a full JSON grammar check driven by a
 * fixed-size container stack (no recursion, so deep nesting cannot exhaust the stack). */
static int wg__scan_composite(const char *s, size_t len, size_t *pos) {
    enum { VALUE_OR_CLOSE, VALUE, KEY_OR_CLOSE, KEY, COLON, COMMA_OR_CLOSE } st = VALUE;
    char stack[WG_JSON_MAX_DEPTH];
    size_t depth = 0, i = *pos;
    for (;;) {
        wg__ws(s, len, &i);
        if (i >= len) return -1;
        char c = s[i];
        int close = 0;
        switch (st) {
        case KEY_OR_CLOSE:
            if (c == '}') { close = 1; break; }
            /* fall through */
        case KEY:
            if (c != '"' || wg__scan_string(s, len, &i) != 0) return -1;
            st = COLON;
            continue;
        case COLON:
            if (c != ':') return -1;
            i++;
            st = VALUE;
            continue;
        case VALUE_OR_CLOSE:
            if (c == ']') { close = 1; break; }
            /* fall through */
        case VALUE:
            if (c == '[' || c == '{') {
                if (depth >= WG_JSON_MAX_DEPTH) return -1;
                stack[depth++] = c;
                i++;
                st = c == '[' ? VALUE_OR_CLOSE : KEY_OR_CLOSE;
                continue;
            }
            if (depth == 0 || wg__scan_scalar(s, len, &i) != 0) return -1;
            st = COMMA_OR_CLOSE;
            continue;
        case COMMA_OR_CLOSE:
            if (c == ',') { i++; st = stack[depth - 1] == '[' ? VALUE : KEY; continue; }
            if (c == (stack[depth - 1] == '[' ? ']' : '}')) { close = 1; break; }
            return -1;
        }
        if (!close || c != (stack[depth - 1] == '[' ? ']' : '}')) return -1;
        i++;
        if (--depth == 0) { *pos = i; return 0; }
        st = COMMA_OR_CLOSE;
    }
}

/* Parse one value at *pos (after whitespace); advance *pos past it. 0 ok, -1 malformed. */
static WG_UNUSED int wg_json_value_at(const char *s, size_t len, size_t *pos, wg_json_value *v) {
    wg__ws(s, len, pos);
    size_t i = *pos;
    if (i >= len) return -1;
    memset(v, 0, sizeof *v);
    v->start = s + i;
    char c = s[i];
    if (c == '"') {
        if (wg__scan_string(s, len, pos) != 0) return -1;
        v->type = WG_JSON_STRING;
        v->start = s + i + 1;
        v->len = *pos - i - 2;
        return 0;
    }
    if (c == '[' || c == '{') {
        if (wg__scan_composite(s, len, pos) != 0) return -1;
        v->type = c == '[' ? WG_JSON_ARRAY : WG_JSON_OBJECT;
    } else if (wg__literal(s, len, i, "true")) {
        v->type = WG_JSON_BOOL; v->boolean = 1; *pos = i + 4;
    } else if (wg__literal(s, len, i, "false")) {
        v->type = WG_JSON_BOOL; *pos = i + 5;
    } else if (wg__literal(s, len, i, "null")) {
        v->type = WG_JSON_NULL; *pos = i + 4;
    } else {
        if (wg__parse_number(s, len, pos, &v->number) != 0) return -1;
        v->type = WG_JSON_NUMBER;
    }
    v->len = *pos - i;
    return 0;
}

/* The whole payload as one JSON value (only whitespace may follow). 0 ok, -1 malformed. */
static WG_UNUSED int wg_json_document(const void *data, size_t len, wg_json_value *v) {
    const char *s = (const char *)data;
    size_t pos = 0;
    if (wg_json_value_at(s, len, &pos, v) != 0) return -1;
    wg__ws(s, len, &pos);
    return pos == len ? 0 : -1;
}

/* Look up `key` among an object's members (raw key bytes are compared, so keys with
 * escapes never match). 1 found, 0 absent, -1 not an object or malformed. */
static WG_UNUSED int wg_json_get(const wg_json_value *obj, const char *key, wg_json_value *out) {
    if (obj->type != WG_JSON_OBJECT) return -1;
    const char *s = obj->start;
    size_t len = obj->len - 1, pos = 1, klen = strlen(key);   /* inside the braces */
    wg__ws(s, len, &pos);
    if (pos == len) return 0;                                   /* {} */
    for (;;) {
        wg_json_value k, v;
        if (wg_json_value_at(s, len, &pos, &k) != 0 || k.type != WG_JSON_STRING) return -1;
        wg__ws(s, len, &pos);
        if (pos >= len || s[pos] != ':') return -1;
        pos++;
        if (wg_json_value_at(s, len, &pos, &v) != 0) return -1;
        if (k.len == klen && memcmp(k.start, key, klen) == 0) { *out = v; return 1; }
        wg__ws(s, len, &pos);
        if (pos == len) return 0;
        if (s[pos] != ',') return -1;
        pos++;
    }
}

/* An array of numbers into out[cap]; *count gets the element count.
 * 0 ok, -1 not an array of numbers, -2 more than cap elements. */
static WG_UNUSED int wg_json_floats(const wg_json_value *arr, float *out, size_t cap, size_t *count) {
    *count = 0;
    if (arr->type != WG_JSON_ARRAY) return -1;
    const char *s = arr->start;
    size_t len = arr->len - 1, pos = 1, n = 0;
    wg__ws(s, len, &pos);
    if (pos == len) return 0;
    for (;;) {
        double d;
        wg__ws(s, len, &pos);
        if (wg__parse_number(s, len, &pos, &d) != 0) return -1;
        if (n >= cap) return -2;
        out[n++] = (float)d;
        *count = n;
        wg__ws(s, len, &pos);
        if (pos == len) return 0;
        if (s[pos] != ',') return -1;
        pos++;
    }
}

/* Decode a string value into buf (NUL-terminated). \uXXXX beyond ASCII becomes '?'.
 * 0 ok, -1 not a string, -2 truncated. */
static WG_UNUSED int wg_json_string_copy(const wg_json_value *v, char *buf, size_t cap) {
    if (cap == 0) return -2;
    buf[0] = '\0';
    if (v->type != WG_JSON_STRING) return -1;
    size_t o = 0;
    for (size_t i = 0; i < v->len; i++) {
        char c = v->start[i];
        if (c == '\\' && i + 1 < v->len) {
            char e = v->start[++i];
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b'
              : e == 'f' ? '\f' : e;
            if (e == 'u') {
                unsigned code = 0;
                for (int k = 0; k < 4 && i + 1 < v->len; k++) {
                    char h = v->start[++i];
                    code = code * 16 + (unsigned)(wg__digit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
                }
                c = code < 0x80 ? (char)code : '?';
            }
        }
        if (o + 1 >= cap) { buf[o] = '\0'; return -2; }
        buf[o++] = c;
    }
    buf[o] = '\0';
    return 0;
}

/* ---- JSON writing into a caller's buffer ---------------------------------------------- */

typedef struct {
    char *data;
    size_t cap, len;
    int overflow;    /* set once anything did not fit; wg_writer_reply then fails */
    int need_comma;
} wg_writer;

static WG_UNUSED void wg_writer_init(wg_writer *w, char *buf, size_t cap) {
    w->data = buf; w->cap = cap; w->len = 0; w->overflow = 0; w->need_comma = 0;
}

static void wg_write_raw(wg_writer *w, const char *s, size_t n) {
    if (w->overflow || n > w->cap - w->len) { w->overflow = 1; return; }
    memcpy(w->data + w->len, s, n);
    w->len += n;
}

static void wg__sep(wg_writer *w) {
    if (w->need_comma) wg_write_raw(w, ",", 1);
    w->need_comma = 1;
}

static WG_UNUSED void wg_json_begin(wg_writer *w) { wg__sep(w); wg_write_raw(w, "{", 1); w->need_comma = 0; }
static WG_UNUSED void wg_json_end(wg_writer *w) { wg_write_raw(w, "}", 1); w->need_comma = 1; }
static WG_UNUSED void wg_json_array_begin(wg_writer *w) { wg__sep(w); wg_write_raw(w, "[", 1); w->need_comma = 0; }
static WG_UNUSED void wg_json_array_end(wg_writer *w) { wg_write_raw(w, "]", 1); w->need_comma = 1; }

static WG_UNUSED void wg_json_str(wg_writer *w, const char *s) {
    wg__sep(w);
    wg_write_raw(w, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; wg_write_raw(w, esc, 2); }
        else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); wg_write_raw(w, esc, 6); }
        else wg_write_raw(w, (const char *)&c, 1);
    }
    wg_write_raw(w, "\"", 1);
}

/* Shortest "%.Ng" (N = 6..max) that reads back as the same value, so timestamps keep
 * their digits and probabilities stay short. */
static void wg__num(wg_writer *w, double v, int max_digits, int as_float) {
    char tmp[40];
    int n = 0;
    wg__sep(w);
    if (!isfinite(v)) { wg_write_raw(w, "null", 4); return; }   /* JSON has no NaN/Inf */
    if (v == floor(v) && fabs(v) < 1e15) {                       /* 1764410000, not 1.76441e+09 */
        n = snprintf(tmp, sizeof tmp, "%.0f", v);
        wg_write_raw(w, tmp, (size_t)n);
        return;
    }
    for (int digits = 6; digits <= max_digits; digits++) {
        n = snprintf(tmp, sizeof tmp, "%.*g", digits, v);
        double back = strtod(tmp, NULL);
        if (as_float ? (float)back == (float)v : back == v) break;
    }
    wg_write_raw(w, tmp, (size_t)n);
}

static WG_UNUSED void wg_json_num(wg_writer *w, double v) { wg__num(w, v, 17, 0); }
static WG_UNUSED void wg_json_float(wg_writer *w, float v) { wg__num(w, v, 9, 1); }

static WG_UNUSED void wg_json_int(wg_writer *w, long long v) {
    char tmp[24];
    wg__sep(w);
    int n = snprintf(tmp, sizeof tmp, "%lld", v);
    wg_write_raw(w, tmp, (size_t)n);
}

static WG_UNUSED void wg_json_bool(wg_writer *w, int v) {
    wg__sep(w);
    wg_write_raw(w, v ? "true" : "false", v ? 4 : 5);
}

/* Object member key; the next value call writes its value. */
static WG_UNUSED void wg_json_key(wg_writer *w, const char *key) {
    wg_json_str(w, key);
    wg_write_raw(w, ":", 1);
    w->need_comma = 0;
}

static WG_UNUSED void wg_json_key_str(wg_writer *w, const char *k, const char *v) { wg_json_key(w, k); wg_json_str(w, v); }
static WG_UNUSED void wg_json_key_num(wg_writer *w, const char *k, double v) { wg_json_key(w, k); wg_json_num(w, v); }
static WG_UNUSED void wg_json_key_float(wg_writer *w, const char *k, float v) { wg_json_key(w, k); wg_json_float(w, v); }
static WG_UNUSED void wg_json_key_int(wg_writer *w, const char *k, long long v) { wg_json_key(w, k); wg_json_int(w, v); }
static WG_UNUSED void wg_json_key_bool(wg_writer *w, const char *k, int v) { wg_json_key(w, k); wg_json_bool(w, v); }

/* Send what was written as the answer: WG_OK, or WG_ADAPTER_ERROR if it overflowed. */
static WG_UNUSED int wg_writer_reply(const wg_writer *w) {
    if (w->overflow) return wg_fail(WG_ADAPTER_ERROR, "answer does not fit the adapter's buffer");
    return wg_reply(w->data, w->len);
}

/* ---- math ----------------------------------------------------------------------------- */

/* In-place softmax (max-subtracted, so large logits do not overflow). */
static WG_UNUSED void wg_softmax(float *v, size_t n) {
    if (n == 0) return;
    float mx = v[0], sum = 0;
    for (size_t i = 1; i < n; i++) if (v[i] > mx) mx = v[i];
    for (size_t i = 0; i < n; i++) { v[i] = expf(v[i] - mx); sum += v[i]; }
    for (size_t i = 0; i < n; i++) v[i] /= sum;
}

/* Index of the largest element (first one on ties; 0 for n == 0). */
static WG_UNUSED size_t wg_argmax(const float *v, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

/* Affine quantization q = round(x / scale) + zero_point, saturated (ONNX QuantizeLinear). */
static WG_UNUSED int8_t wg_quantize_i8(float x, float scale, int32_t zero_point) {
    float q = rintf(x / scale) + (float)zero_point;
    return (int8_t)(q < -128.f ? -128.f : q > 127.f ? 127.f : q);
}
static WG_UNUSED uint8_t wg_quantize_u8(float x, float scale, int32_t zero_point) {
    float q = rintf(x / scale) + (float)zero_point;
    return (uint8_t)(q < 0.f ? 0.f : q > 255.f ? 255.f : q);
}
static WG_UNUSED float wg_dequantize_i8(int8_t q, float scale, int32_t zero_point) {
    return (float)((int32_t)q - zero_point) * scale;
}
static WG_UNUSED float wg_dequantize_u8(uint8_t q, float scale, int32_t zero_point) {
    return (float)((int32_t)q - zero_point) * scale;
}

/* ---- adapter state (import set "state" v1) -------------------------------------------- */

/* What the state_* calls return. */
#define WG_STATE_OK 0
#define WG_STATE_NOT_FOUND 1
#define WG_STATE_BUFFER_TOO_SMALL 2 /* *len / written = the size needed */
#define WG_STATE_NOT_GRANTED 3      /* bundle.toml has no [state] table */
#define WG_STATE_KEY_TOO_LONG 4     /* keys are 1..WG_STATE_MAX_KEY bytes */
#define WG_STATE_VALUE_TOO_BIG 5    /* the value (alone or with what is stored) > max_bytes */
#define WG_STATE_TOO_MANY_KEYS 6    /* a new key beyond max_keys */
#define WG_STATE_FAILED 7           /* the daemon's store failed (disk full): nothing written */
#define WG_STATE_MAX_KEY 256

WG_IMPORT("state_get")
int32_t wg__state_get(const char *key, int32_t key_len, void *buf, int32_t cap, int32_t *written);
WG_IMPORT("state_set")
int32_t wg__state_set(const char *key, int32_t key_len, const void *val, int32_t val_len,
                      uint32_t ttl_ms);
WG_IMPORT("state_delete") int32_t wg__state_delete(const char *key, int32_t key_len);

static WG_UNUSED const char *wg_state_strerror(int e) {
    static const char *names[] = {"ok", "not found", "buffer too small", "state not granted",
                                  "key too long", "value too big", "too many keys",
                                  "state store failed"};
    return e >= 0 && e < 8 ? names[e] : "unknown state error";
}

/* Read `key` into buf[cap]; *len gets the value's size (also when buf is too small).
 * Returns WG_STATE_*. The key is a NUL-terminated string. */
static WG_UNUSED int wg_state_get(const char *key, void *buf, size_t cap, size_t *len) {
    int32_t written = 0;
    int32_t c = cap > INT32_MAX ? INT32_MAX : (int32_t)cap;
    int e = (int)wg__state_get(key, (int32_t)wg__strlen(key, WG_STATE_MAX_KEY + 1), buf, c,
                               &written);
    *len = written > 0 ? (size_t)written : 0;
    return e;
}

/* Store len bytes under `key`, atomically; ttl_ms 0 keeps it until deleted. WG_STATE_*. */
static WG_UNUSED int wg_state_set(const char *key, const void *data, size_t len,
                                  uint32_t ttl_ms) {
    if (len > INT32_MAX) return WG_STATE_VALUE_TOO_BIG;
    return (int)wg__state_set(key, (int32_t)wg__strlen(key, WG_STATE_MAX_KEY + 1), data,
                              (int32_t)len, ttl_ms);
}

static WG_UNUSED int wg_state_delete(const char *key) {
    return (int)wg__state_delete(key, (int32_t)wg__strlen(key, WG_STATE_MAX_KEY + 1));
}

/* An array of floats kept under `key` (raw little-endian f32). *count gets how many were
 * stored (0 when the key is absent: that is WG_STATE_OK too). */
static WG_UNUSED int wg_state_get_floats(const char *key, float *out, size_t cap, size_t *count) {
    size_t len = 0;
    int e = wg_state_get(key, out, cap * sizeof(float), &len);
    *count = 0;
    if (e == WG_STATE_NOT_FOUND) return WG_STATE_OK;
    if (e != WG_STATE_OK) return e;
    *count = len / sizeof(float);
    return WG_STATE_OK;
}

static WG_UNUSED int wg_state_set_floats(const char *key, const float *v, size_t n,
                                         uint32_t ttl_ms) {
    return wg_state_set(key, v, n * sizeof(float), ttl_ms);
}

#define WG_MOVING_AVERAGE_MAX 256

/* Append `value` to the last `window` readings kept under `key` (oldest dropped) and give
 * their mean in *mean and how many there are in *count. Without state (not granted, or the
 * store refuses) the mean is of `value` alone, *count is 1, and the WG_STATE_* code is
 * returned so the caller can log it; the answer stays usable either way. */
static WG_UNUSED int wg_moving_average(const char *key, float value, size_t window, float *mean,
                                       size_t *count) {
    static float ring[WG_MOVING_AVERAGE_MAX + 1];
    size_t n = 0;
    if (window == 0) window = 1;
    if (window > WG_MOVING_AVERAGE_MAX) window = WG_MOVING_AVERAGE_MAX;
    int e = wg_state_get_floats(key, ring, WG_MOVING_AVERAGE_MAX, &n);
    if (e == WG_STATE_BUFFER_TOO_SMALL) e = WG_STATE_OK; /* not ours: start the window again */
    if (e != WG_STATE_OK) n = 0;
    if (n >= window) {
        memmove(ring, ring + (n - window + 1), (window - 1) * sizeof(float));
        n = window - 1;
    }
    ring[n++] = value;
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += ring[i];
    int w = e == WG_STATE_OK ? wg_state_set_floats(key, ring, n, 0) : e;
    if (w != WG_STATE_OK) {
        *mean = value;
        *count = 1;
        return w;
    }
    *mean = (float)(sum / (double)n);
    *count = n;
    return WG_STATE_OK;
}

/* ---- models (wasi-nn) ----------------------------------------------------------------- */

static WG_UNUSED const char *wg_nn_strerror(int e) {
    static const char *names[] = {"success", "invalid argument", "invalid encoding",
                                  "missing memory", "busy", "runtime error",
                                  "unsupported operation", "too large", "not found"};
    return e >= 0 && e < 9 ? names[e] : "unknown wasi-nn error";
}

/* Load a model declared in bundle.toml by its name. Returns the wasi-nn errno (0 ok). */
static WG_UNUSED int wg_nn_load(const char *name, wasi_nn_graph *graph) {
    return (int)wasi_nn_load_by_name(name, (uint32_t)strlen(name), graph);
}

/* The fused host call behind wg_nn_infer_f32 (one crossing instead of four). */
WG_IMPORT("nn_infer_f32")
int32_t wg__nn_infer_f32(wasi_nn_graph graph, const uint32_t *dims, uint32_t rank,
                         const void *in, uint32_t in_len, void *out, uint32_t out_cap,
                         uint32_t *written);

/* One single-input, single-output FP32 inference: input 0 with shape dims[rank],
 * output 0 into out[out_cap] (*out_n gets the element count). Returns the wasi-nn errno
 * (too_large with *out_n = the elements needed when out_cap is too small). One host call
 * (wasmgate.nn_infer_f32, wasmgate >= 0.2); the raw wasi-nn calls below do the same in four. */
static WG_UNUSED int wg_nn_infer_f32(wasi_nn_graph graph, const uint32_t *dims, uint32_t rank,
                                     const float *in, size_t in_n, float *out, size_t out_cap,
                                     size_t *out_n) {
    uint32_t written = 0;
    int e = (int)wg__nn_infer_f32(graph, dims, rank, in, (uint32_t)(in_n * sizeof(float)), out,
                                  (uint32_t)(out_cap * sizeof(float)), &written);
    *out_n = written / sizeof(float);
    return e;
}

#endif /* WASMGATE_H */
