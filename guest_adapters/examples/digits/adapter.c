/*
 * digits — classify an 8x8 grayscale digit with the "digits-mlp" model (MLP 64-32-10).
 *
 * Payload (any of):
 *   - 64 raw bytes, row-major, 0..255 grayscale (content type application/octet-stream,
 *     or any 64-byte payload that is not JSON);
 *   - a JSON array of 64 numbers, 0..16 (the scale of the sklearn digits set);
 *   - a JSON object {"pixels": [64 numbers 0..16]}.
 * Answer: {"digit": d, "confidence": p}. When p < param.confidence_threshold (bundle.toml
 * [params]) the adapter also asks the daemon for cloud fallback ("low confidence"); the
 * local answer stands if the bundle or the daemon does not allow fallback.
 */
#include "wasmgate.h"

#define PIXELS 64
#define CLASSES 10
#define DEFAULT_THRESHOLD 0.7

/* Fill px[64] (model scale 0..16) from the payload; on error write a message to err. */
static int read_pixels(const uint8_t *p, size_t n, float *px, char *err, size_t errcap) {
    char ctype[64] = "";
    wg_meta("content_type", ctype, sizeof ctype);
    int is_raw = strncmp(ctype, "application/octet-stream", 24) == 0 ||
                 (n == PIXELS && p[0] != '[' && p[0] != '{' && strncmp(ctype, "application/json", 16) != 0);
    if (is_raw) {
        if (n != PIXELS) {
            snprintf(err, errcap, "raw payload must be 64 bytes (8x8 grayscale), got %zu", n);
            return -1;
        }
        for (size_t i = 0; i < PIXELS; i++) px[i] = (float)p[i] * (16.0f / 255.0f);
        return 0;
    }
    wg_json_value doc, arr;
    if (wg_json_document(p, n, &doc) != 0) {
        snprintf(err, errcap, "payload is neither 64 raw bytes nor valid JSON");
        return -1;
    }
    arr = doc;
    if (doc.type == WG_JSON_OBJECT && wg_json_get(&doc, "pixels", &arr) != 1) {
        snprintf(err, errcap, "JSON object needs a \"pixels\" array of 64 numbers");
        return -1;
    }
    size_t count = 0;
    int rc = wg_json_floats(&arr, px, PIXELS, &count);
    if (rc != 0 || count != PIXELS) {
        snprintf(err, errcap, "expected an array of 64 numbers (8x8, 0..16)%s",
                 rc == -2 ? ", got more" : rc == -1 ? ", got something else" : ", got fewer");
        return -1;
    }
    for (size_t i = 0; i < PIXELS; i++) {
        if (!(px[i] >= 0.0f && px[i] <= 16.0f)) {
            snprintf(err, errcap, "pixel %zu is %g, expected 0..16", i, (double)px[i]);
            return -1;
        }
    }
    return 0;
}

static int handle(const uint8_t *payload, size_t len) {
    float px[PIXELS], probs[CLASSES];
    char err[128];
    if (read_pixels(payload, len, px, err, sizeof err) != 0) return wg_fail(WG_BAD_INPUT, err);

    double threshold;
    if (wg_param_double("confidence_threshold", DEFAULT_THRESHOLD, &threshold) != 0)
        return wg_fail(WG_ADAPTER_ERROR, "param confidence_threshold is not a number");

    wasi_nn_graph g;
    static const uint32_t dims[2] = {1, PIXELS};
    size_t n_out = 0;
    int e = wg_nn_load("digits-mlp", &g);
    if (e == 0) e = wg_nn_infer_f32(g, dims, 2, px, PIXELS, probs, CLASSES, &n_out);
    if (e != 0 || n_out != CLASSES) {
        snprintf(err, sizeof err, "digits model failed: %s", e ? wg_nn_strerror(e) : "wrong output size");
        return wg_fail(WG_ADAPTER_ERROR, err);
    }
    /* The model ends in Softmax already; argmax of probabilities is the digit. */
    size_t digit = wg_argmax(probs, CLASSES);
    double confidence = probs[digit];
    if (confidence < threshold) wg_fallback("low confidence");

    char out[96];
    wg_writer w;
    wg_writer_init(&w, out, sizeof out);
    wg_json_begin(&w);
    wg_json_key_int(&w, "digit", (long long)digit);
    wg_json_key_float(&w, "confidence", (float)confidence);
    wg_json_end(&w);
    return wg_writer_reply(&w);
}

WASMGATE_ADAPTER(handle)
