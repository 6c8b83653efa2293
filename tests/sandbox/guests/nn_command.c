/* A WASI command guest in the style of the WasmEdge wasi-nn examples:
 *   nn_command name INPUT            -- load_by_name("default")
 *   nn_command bytes INPUT MODEL     -- read MODEL through WASI, then load() it as ONNX
 *   nn_command single INPUT          -- WasmEdge's LLM-example loop: load_by_name_with_config,
 *                                       compute_single until end of sequence, fini_single
 *   nn_command peek PATH             -- try to open PATH (outside --dir it must fail)
 *   nn_command write PATH            -- try to create PATH
 * INPUT holds 4 little-endian floats; prints the 4 outputs. Exit code = $EXIT_CODE or 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wasi_nn.h"

static uint8_t *slurp(const char *path, uint32_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = malloc(1 << 20);
    *len = (uint32_t)fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s MODE PATH [MODEL]\n", argv[0]); return 2; }
    uint32_t len = 0;
    if (!strcmp(argv[1], "peek")) { puts(slurp(argv[2], &len) ? "readable" : "no access"); return 0; }
    if (!strcmp(argv[1], "write")) { puts(fopen(argv[2], "wb") ? "written" : "no access"); return 0; }
    uint8_t *input = slurp(argv[2], &len);
    if (!input || len != 16) { fprintf(stderr, "cannot read 16 bytes from %s\n", argv[2]); return 3; }
    wasi_nn_graph g;
    int32_t e;
    if (!strcmp(argv[1], "bytes")) {
        uint32_t mlen = 0;
        uint8_t *model = argc > 3 ? slurp(argv[3], &mlen) : NULL;
        if (!model) { fprintf(stderr, "cannot read model\n"); return 4; }
        wasi_nn_graph_builder b = {model, mlen};
        e = wasi_nn_load(&b, 1, WASI_NN_ENCODING_ONNX, WASI_NN_TARGET_CPU, &g);
    } else if (!strcmp(argv[1], "single")) {
        const char *config = "{\"n-gpu-layers\": 0, \"ctx-size\": 512}";
        e = wasi_nn_load_by_name_with_config("default", 7, config, (uint32_t)strlen(config), &g);
    } else {
        e = wasi_nn_load_by_name("default", 7, &g);
    }
    if (e) { fprintf(stderr, "load failed: %d\n", (int)e); return 5; }
    wasi_nn_context c;
    uint32_t dims[2] = {1, 4}, written = 0;
    wasi_nn_tensor t = {dims, 2, WASI_NN_TYPE_F32, input, 16};
    float out[4];
    if (!strcmp(argv[1], "single")) {
        int steps = 0;
        if ((e = wasi_nn_init_execution_context(g, &c)) || (e = wasi_nn_set_input(c, 0, &t))) return 6;
        while ((e = wasi_nn_compute_single(c)) == 0) {
            if ((e = wasi_nn_get_output_single(c, 0, (uint8_t *)out, sizeof out, &written))) return 7;
            printf("%.1f %.1f %.1f %.1f\n", out[0], out[1], out[2], out[3]);
            steps++;
        }
        if (e != WASI_NN_ERRNO_END_OF_SEQUENCE || wasi_nn_fini_single(c)) return 8;
        return steps == 1 ? 0 : 9;
    }
    if ((e = wasi_nn_init_execution_context(g, &c)) || (e = wasi_nn_set_input(c, 0, &t)) ||
        (e = wasi_nn_compute(c)) || (e = wasi_nn_get_output(c, 0, (uint8_t *)out, sizeof out, &written))) {
        fprintf(stderr, "wasi-nn failed: %d\n", (int)e);
        return 6;
    }
    printf("%.1f %.1f %.1f %.1f\n", out[0], out[1], out[2], out[3]);
    const char *code = getenv("EXIT_CODE");
    return code ? atoi(code) : 0;
}
