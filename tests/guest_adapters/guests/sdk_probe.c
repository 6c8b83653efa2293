/* Exercises the SDK helpers; the payload's first byte picks the check, the rest is input.
 *   'j' <json>   parse, answer {"type":..., "a": [floats of key a], "s": "<decoded key s>"}
 *   'q' <json>   {"x": [floats]} -> quantize/dequantize with scale 0.1 zp -3 (i8) and u8
 *   'm'          softmax([1,2,3,1000]) and argmax
 *   'p' <name>   wg_param_str(name) with an 8-byte buffer and a 256-byte one
 *   'o'          answer that overflows a 16-byte writer
 *   'n' <json>   wg_json_num of {"v": number}
 */
#include "wasmgate.h"

static char out[4096];

static int parse(const uint8_t *p, size_t n, wg_writer *w) {
    wg_json_value doc, v;
    if (wg_json_document(p, n, &doc) != 0) return wg_fail(WG_BAD_INPUT, "malformed JSON");
    wg_json_begin(w);
    wg_json_key_int(w, "type", doc.type);
    if (doc.type == WG_JSON_OBJECT) {
        float a[8];
        size_t count = 0;
        int rc = wg_json_get(&doc, "a", &v);
        wg_json_key_int(w, "get_a", rc);
        if (rc == 1) {
            wg_json_key_int(w, "floats_rc", wg_json_floats(&v, a, 8, &count));
            wg_json_key(w, "a");
            wg_json_array_begin(w);
            for (size_t i = 0; i < count; i++) wg_json_float(w, a[i]);
            wg_json_array_end(w);
        }
        if (wg_json_get(&doc, "s", &v) == 1) {
            char s[16];
            wg_json_key_int(w, "copy_rc", wg_json_string_copy(&v, s, sizeof s));
            wg_json_key_str(w, "s", s);
        }
    }
    wg_json_end(w);
    return wg_writer_reply(w);
}

static int quant(const uint8_t *p, size_t n, wg_writer *w) {
    wg_json_value doc, v;
    float x[16];
    size_t count = 0;
    if (wg_json_document(p, n, &doc) || wg_json_get(&doc, "x", &v) != 1 || wg_json_floats(&v, x, 16, &count))
        return wg_fail(WG_BAD_INPUT, "want {\"x\": [numbers]}");
    wg_json_begin(w);
    wg_json_key(w, "i8");
    wg_json_array_begin(w);
    for (size_t i = 0; i < count; i++) wg_json_int(w, wg_quantize_i8(x[i], 0.1f, -3));
    wg_json_array_end(w);
    wg_json_key(w, "back");
    wg_json_array_begin(w);
    for (size_t i = 0; i < count; i++) wg_json_float(w, wg_dequantize_i8(wg_quantize_i8(x[i], 0.1f, -3), 0.1f, -3));
    wg_json_array_end(w);
    wg_json_key(w, "u8");
    wg_json_array_begin(w);
    for (size_t i = 0; i < count; i++) wg_json_int(w, wg_quantize_u8(x[i], 0.1f, 3));
    wg_json_array_end(w);
    wg_json_end(w);
    return wg_writer_reply(w);
}

static int handle(const uint8_t *p, size_t n) {
    wg_writer w;
    wg_writer_init(&w, out, sizeof out);
    if (n == 0) return wg_fail(WG_BAD_INPUT, "empty");
    const uint8_t *rest = p + 1;
    size_t rn = n - 1;
    switch (p[0]) {
    case 'j': return parse(rest, rn, &w);
    case 'q': return quant(rest, rn, &w);
    case 'm': {
        float v[4] = {1, 2, 3, 1000};
        wg_softmax(v, 4);
        wg_json_begin(&w);
        wg_json_key_int(&w, "argmax", (long long)wg_argmax(v, 4));
        wg_json_key(&w, "p");
        wg_json_array_begin(&w);
        for (int i = 0; i < 4; i++) wg_json_float(&w, v[i]);
        wg_json_array_end(&w);
        wg_json_end(&w);
        return wg_writer_reply(&w);
    }
    case 'p': {
        char name[64], small[8], big[256];
        if (rn >= sizeof name) return wg_fail(WG_BAD_INPUT, "name too long");
        memcpy(name, rest, rn);
        name[rn] = '\0';
        int a = wg_param_str(name, small, sizeof small);
        int b = wg_param_str(name, big, sizeof big);
        double d = -1;
        int c = wg_param_double(name, 42.0, &d);
        wg_json_begin(&w);
        wg_json_key_int(&w, "small", a);
        wg_json_key_int(&w, "big", b);
        if (b >= 0) wg_json_key_str(&w, "value", big);
        wg_json_key_int(&w, "double_rc", c);
        wg_json_key_num(&w, "double", d);
        wg_json_end(&w);
        return wg_writer_reply(&w);
    }
    case 'o': {
        char tiny[16];
        wg_writer t;
        wg_writer_init(&t, tiny, sizeof tiny);
        wg_json_begin(&t);
        wg_json_key_str(&t, "long", "more than sixteen bytes");
        wg_json_end(&t);
        return wg_writer_reply(&t);
    }
    case 'n': {
        wg_json_value doc, v;
        if (wg_json_document(rest, rn, &doc) || wg_json_get(&doc, "v", &v) != 1 || v.type != WG_JSON_NUMBER)
            return wg_fail(WG_BAD_INPUT, "want {\"v\": number}");
        wg_json_num(&w, v.number);
        return wg_writer_reply(&w);
    }
    default: return wg_fail(WG_BAD_INPUT, "unknown command");
    }
}

WASMGATE_ADAPTER(handle)
