/*
 * digits-pipeline — two models in one adapter: a gate decides whether the 8x8 image is a
 * digit at all (model "pipeline-gate", MLP 64-16-1, sigmoid), and only then the classifier
 * runs ("pipeline-digits", the digits MLP). Model names are daemon-wide (they are also KServe
 * V2 model names), so this bundle does not reuse the digits example's "digits".
 *
 * Payload: as the digits example (64 raw bytes 0..255, a JSON array of 64 numbers 0..16,
 * or {"pixels": [...]}).
 * Answer:  {"is_digit": false, "gate": p}                       when p < param.gate_threshold
 *          {"is_digit": true, "gate": p, "digit": d, "confidence": c}   otherwise
 * Low classifier confidence (< param.confidence_threshold) asks for cloud fallback, as in
 * the digits example. Rejecting noise early saves the second model run.
 */
#include "wasmgate.h"

#define PIXELS 64
#define CLASSES 10

static int read_pixels(const uint8_t *p, size_t n, float *px, const char **err) {
    char ctype[64] = "";
    wg_meta("content_type", ctype, sizeof ctype);
    int is_raw = strncmp(ctype, "application/octet-stream", 24) == 0 ||
                 (n == PIXELS && p[0] != '[' && p[0] != '{' && strncmp(ctype, "application/json", 16) != 0);
    if (is_raw) {
        if (n != PIXELS) { *err = "raw payload must be 64 bytes (8x8 grayscale)"; return -1; }
        for (size_t i = 0; i < PIXELS; i++) px[i] = (float)p[i] * (16.0f / 255.0f);
        return 0;
    }
    wg_json_value doc, arr;
    size_t count = 0;
    if (wg_json_document(p, n, &doc) != 0) { *err = "payload is neither 64 raw bytes nor valid JSON"; return -1; }
    arr = doc;
    if (doc.type == WG_JSON_OBJECT && wg_json_get(&doc, "pixels", &arr) != 1) {
        *err = "JSON object needs a \"pixels\" array of 64 numbers";
        return -1;
    }
    if (wg_json_floats(&arr, px, PIXELS, &count) != 0 || count != PIXELS) {
        *err = "expected an array of 64 numbers (8x8, 0..16)";
        return -1;
    }
    for (size_t i = 0; i < PIXELS; i++)
        if (!(px[i] >= 0.0f && px[i] <= 16.0f)) { *err = "pixel values must be 0..16"; return -1; }
    return 0;
}

/* Run model `name` on the 64 pixels; out[cap] gets its single output. */
static int run(const char *name, const float *px, float *out, size_t cap, char *err, size_t errcap) {
    static const uint32_t dims[2] = {1, PIXELS};
    wasi_nn_graph g;
    size_t n_out = 0;
    int e = wg_nn_load(name, &g);
    if (e == 0) e = wg_nn_infer_f32(g, dims, 2, px, PIXELS, out, cap, &n_out);
    if (e == 0 && n_out == cap) return 0;
    snprintf(err, errcap, "%s model failed: %s", name, e ? wg_nn_strerror(e) : "wrong output size");
    return -1;
}

static int handle(const uint8_t *payload, size_t len) {
    float px[PIXELS], gate = 0, probs[CLASSES];
    const char *bad = NULL;
    char err[96], out[128];
    if (read_pixels(payload, len, px, &bad) != 0) return wg_fail(WG_BAD_INPUT, bad);
    double gate_threshold, conf_threshold;
    if (wg_param_double("gate_threshold", 0.5, &gate_threshold) != 0 ||
        wg_param_double("confidence_threshold", 0.7, &conf_threshold) != 0)
        return wg_fail(WG_ADAPTER_ERROR, "params gate_threshold/confidence_threshold must be numbers");

    if (run("pipeline-gate", px, &gate, 1, err, sizeof err) != 0) return wg_fail(WG_ADAPTER_ERROR, err);
    wg_writer w;
    wg_writer_init(&w, out, sizeof out);
    wg_json_begin(&w);
    wg_json_key_bool(&w, "is_digit", gate >= gate_threshold);
    wg_json_key_float(&w, "gate", gate);
    if (gate >= gate_threshold) {
        if (run("pipeline-digits", px, probs, CLASSES, err, sizeof err) != 0) return wg_fail(WG_ADAPTER_ERROR, err);
        size_t digit = wg_argmax(probs, CLASSES);
        if (probs[digit] < conf_threshold) wg_fallback("low confidence");
        wg_json_key_int(&w, "digit", (long long)digit);
        wg_json_key_float(&w, "confidence", probs[digit]);
    }
    wg_json_end(&w);
    return wg_writer_reply(&w);
}

WASMGATE_ADAPTER(handle)
