/*
 * vibration-anomaly — score one pump vibration window with the "anomaly" model (MLP 8-16-1).
 *
 * Payload: {"device": "pump-7", "ts": 1764410000.0, "accel": [64 numbers, g @ 1 kHz], "temp": 51.2}
 * Answer:  {"device": "pump-7", "ts": ..., "anomaly": true|false, "score": 0..1,
 *           "mean_score": 0..1, "readings": n}
 * An anomaly (score >= param.threshold, default 0.5) is also published with emit_event,
 * which the MQTT bridge sends to events/<adapter>. mean_score is the moving average of the
 * device's last param.average_window scores (default 8), kept in the adapter's state store
 * ([state] in bundle.toml) under "avg/<device>", so it survives requests and restarts;
 * without state it is this window's score alone (readings 1).
 *
 * The features must match the model's training exactly (guest_adapters/models/README.md,
 * window_features in gen_mlp_models.py): on the mean-removed window x,
 *   rms, peak = max|x|, crest = peak/rms, kurtosis = mean(x^4)/rms^4,
 *   band_low/mid/high = share of DFT power in bins 1..4 / 5..12 / 13..32 of bins 1..32,
 *   temp. The model normalises them itself; we send the raw values.
 */
#include "wasmgate.h"

#define WINDOW 64
#define N_FEATURES 8
#define DEVICE_MAX 64
#define DEFAULT_THRESHOLD 0.5
#define DEFAULT_AVERAGE_WINDOW 8

static const int BANDS[3][2] = {{1, 4}, {5, 12}, {13, 32}};

/* Doubles throughout, like numpy, so the features match the training data bit for bit-ish. */
static void features(const float *accel, double temp, float *out) {
    double x[WINDOW], mean = 0, s2 = 0, s4 = 0, peak = 0;
    for (int i = 0; i < WINDOW; i++) mean += accel[i];
    mean /= WINDOW;
    for (int i = 0; i < WINDOW; i++) {
        x[i] = accel[i] - mean;
        double a = fabs(x[i]);
        s2 += x[i] * x[i];
        s4 += x[i] * x[i] * x[i] * x[i];
        if (a > peak) peak = a;
    }
    double rms = sqrt(s2 / WINDOW);
    double power[WINDOW / 2 + 1] = {0}, total = 0;
    /* A direct DFT: 32 bins x 64 samples is cheaper than shipping an FFT. */
    for (int k = 1; k <= WINDOW / 2; k++) {
        double re = 0, im = 0;
        for (int n = 0; n < WINDOW; n++) {
            double ang = 2.0 * M_PI * k * n / WINDOW;
            re += x[n] * cos(ang);
            im -= x[n] * sin(ang);
        }
        power[k] = re * re + im * im;
        total += power[k];
    }
    out[0] = (float)rms;
    out[1] = (float)peak;
    out[2] = (float)(rms > 0 ? peak / rms : 0);
    out[3] = (float)(rms > 0 ? (s4 / WINDOW) / (rms * rms * rms * rms) : 0);
    for (int b = 0; b < 3; b++) {
        double e = 0;
        for (int k = BANDS[b][0]; k <= BANDS[b][1]; k++) e += power[k];
        out[4 + b] = (float)(total > 0 ? e / total : 0);
    }
    out[7] = (float)temp;
}

typedef struct {
    char device[DEVICE_MAX + 1];
    int has_ts;
    double ts, temp;
    float accel[WINDOW];
} window_t;

static const char *parse(const uint8_t *p, size_t n, window_t *w) {
    wg_json_value doc, v;
    if (wg_json_document(p, n, &doc) != 0 || doc.type != WG_JSON_OBJECT)
        return "payload must be a JSON object {\"device\", \"ts\", \"accel\", \"temp\"}";
    if (wg_json_get(&doc, "device", &v) != 1 || v.type != WG_JSON_STRING)
        return "\"device\" must be a string";
    if (wg_json_string_copy(&v, w->device, sizeof w->device) != 0)
        return "\"device\" is longer than 64 characters";
    if (wg_json_get(&doc, "temp", &v) != 1 || v.type != WG_JSON_NUMBER)
        return "\"temp\" must be a number (degrees C)";
    w->temp = v.number;
    int rc = wg_json_get(&doc, "ts", &v);
    if (rc == 1 && v.type != WG_JSON_NUMBER) return "\"ts\" must be a number (seconds)";
    w->has_ts = rc == 1;
    w->ts = v.number;
    size_t count = 0;
    if (wg_json_get(&doc, "accel", &v) != 1 || wg_json_floats(&v, w->accel, WINDOW, &count) != 0 ||
        count != WINDOW)
        return "\"accel\" must be an array of exactly 64 numbers (g, 1 kHz)";
    return NULL;
}

static int handle(const uint8_t *payload, size_t len) {
    static window_t w; /* static: keeps the 64-sample window off the small wasm stack */
    const char *err = parse(payload, len, &w);
    if (err) return wg_fail(WG_BAD_INPUT, err);

    double threshold;
    if (wg_param_double("threshold", DEFAULT_THRESHOLD, &threshold) != 0)
        return wg_fail(WG_ADAPTER_ERROR, "param threshold is not a number");

    float feat[N_FEATURES], score = 0;
    features(w.accel, w.temp, feat);
    wasi_nn_graph g;
    static const uint32_t dims[2] = {1, N_FEATURES};
    size_t n_out = 0;
    int e = wg_nn_load("anomaly", &g);
    if (e == 0) e = wg_nn_infer_f32(g, dims, 2, feat, N_FEATURES, &score, 1, &n_out);
    if (e != 0 || n_out != 1) {
        char msg[96];
        snprintf(msg, sizeof msg, "anomaly model failed: %s", e ? wg_nn_strerror(e) : "wrong output size");
        return wg_fail(WG_ADAPTER_ERROR, msg);
    }
    int anomaly = score >= threshold;

    double window = DEFAULT_AVERAGE_WINDOW;
    if (wg_param_double("average_window", DEFAULT_AVERAGE_WINDOW, &window) != 0 || window < 1)
        window = DEFAULT_AVERAGE_WINDOW;
    char key[16 + DEVICE_MAX];
    snprintf(key, sizeof key, "avg/%s", w.device);
    float mean = score;
    size_t readings = 1;
    int se = wg_moving_average(key, score, (size_t)window, &mean, &readings);
    if (se != WG_STATE_OK && se != WG_STATE_NOT_GRANTED) {
        char msg[96];
        snprintf(msg, sizeof msg, "moving average not kept: %s", wg_state_strerror(se));
        wg_log(WG_WARN, msg);
    }

    char out[256];
    wg_writer wr;
    wg_writer_init(&wr, out, sizeof out);
    wg_json_begin(&wr);
    wg_json_key_str(&wr, "device", w.device);
    if (w.has_ts) wg_json_key_num(&wr, "ts", w.ts);
    wg_json_key_bool(&wr, "anomaly", anomaly);
    wg_json_key_float(&wr, "score", score);
    wg_json_key_float(&wr, "mean_score", mean);
    wg_json_key_int(&wr, "readings", (long long)readings);
    wg_json_end(&wr);
    if (wr.overflow) return wg_fail(WG_ADAPTER_ERROR, "answer too large");
    if (anomaly && wg_emit(wr.data, wr.len) != 0) wg_log(WG_WARN, "anomaly event was not published");
    return wg_writer_reply(&wr);
}

WASMGATE_ADAPTER(handle)
