/*
 * state_probe — replays state commands from the payload and reports every WG_STATE_* code.
 *
 * Payload: one command per line, fields separated by single spaces:
 *   get KEY               -> "<code> <value>" (value empty unless code 0)
 *   set KEY VALUE TTL_MS  -> "<code>"
 *   big KEY N             -> "<code>"   (sets N bytes of 'x', no TTL)
 *   del KEY               -> "<code>"
 *   avg KEY VALUE WINDOW  -> "<code> <mean> <count>" (wg_moving_average)
 *   small KEY             -> "<code> <len>" (wg_state_get into a 1-byte buffer)
 * The answer holds one result line per command. KEY "-" is the empty key; a KEY starting
 * with '#' is that many 'k's (for over-long keys), e.g. "#300".
 */
#include "wasmgate.h"

static char out[8192];
static size_t used;

static void put(const char *text) {
    size_t n = strlen(text);
    if (used + n + 1 >= sizeof out) return;
    memcpy(out + used, text, n);
    used += n;
    out[used++] = '\n';
}

/* The next space- or newline-terminated field of line[*pos..len), NUL-terminated in buf. */
static void field(const char *s, size_t len, size_t *pos, char *buf, size_t cap) {
    size_t n = 0;
    while (*pos < len && s[*pos] != ' ' && s[*pos] != '\n') {
        if (n + 1 < cap) buf[n++] = s[*pos];
        (*pos)++;
    }
    if (*pos < len && s[*pos] == ' ') (*pos)++;
    buf[n] = '\0';
}

static void key_of(const char *raw, char *key, size_t cap) {
    if (strcmp(raw, "-") == 0) {
        key[0] = '\0';
    } else if (raw[0] == '#') {
        size_t n = (size_t)atoi(raw + 1);
        if (n >= cap) n = cap - 1;
        memset(key, 'k', n);
        key[n] = '\0';
    } else {
        snprintf(key, cap, "%s", raw);
    }
}

static void command(const char *s, size_t len) {
    static char op[16], raw[300], key[600], a[2048], b[32], line[2200];
    static char big[70000];
    size_t pos = 0;
    field(s, len, &pos, op, sizeof op);
    field(s, len, &pos, raw, sizeof raw);
    field(s, len, &pos, a, sizeof a);
    field(s, len, &pos, b, sizeof b);
    key_of(raw, key, sizeof key);
    if (strcmp(op, "get") == 0) {
        size_t n = 0;
        int e = wg_state_get(key, a, sizeof a - 1, &n);
        a[e == WG_STATE_OK ? n : 0] = '\0';
        snprintf(line, sizeof line, "%d %s", e, a);
    } else if (strcmp(op, "set") == 0) {
        snprintf(line, sizeof line, "%d", wg_state_set(key, a, strlen(a), (uint32_t)atol(b)));
    } else if (strcmp(op, "big") == 0) {
        size_t n = (size_t)atol(a);
        if (n > sizeof big) n = sizeof big;
        memset(big, 'x', n);
        snprintf(line, sizeof line, "%d", wg_state_set(key, big, n, 0));
    } else if (strcmp(op, "del") == 0) {
        snprintf(line, sizeof line, "%d", wg_state_delete(key));
    } else if (strcmp(op, "avg") == 0) {
        float mean = 0;
        size_t count = 0;
        int e = wg_moving_average(key, (float)atof(a), (size_t)atol(b), &mean, &count);
        snprintf(line, sizeof line, "%d %g %zu", e, (double)mean, count);
    } else if (strcmp(op, "small") == 0) {
        char one[1];
        size_t n = 0;
        int e = wg_state_get(key, one, sizeof one, &n);
        snprintf(line, sizeof line, "%d %zu", e, n);
    } else {
        snprintf(line, sizeof line, "? %s", op);
    }
    put(line);
}

static int handle(const uint8_t *payload, size_t len) {
    const char *s = (const char *)payload;
    size_t start = 0;
    used = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || s[i] == '\n') {
            if (i > start) command(s + start, i - start);
            start = i + 1;
        }
    }
    return wg_reply(out, used);
}

WASMGATE_ADAPTER(handle)
