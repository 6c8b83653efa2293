/* wasi_nn.h — wasi-nn preview1 (`wasi_ephemeral_nn`) imports for C guests built with
 * `python -m ziglang cc --target=wasm32-wasi`.
 *
 * The exact core-wasm ABI the wasmgate host implements (same as wasmtime's witx host and
 * WasmEdge's plugin): every function takes i32 values and returns an errno (0 = success);
 * results come back through out-pointers to little-endian u32s in the guest's memory.
 * Handles count up from 0 and belong to the calling instance.
 *
 * Host behaviour worth knowing:
 *   - The tensor type is read as ONE byte at offset 8. Both numberings are accepted (current
 *     witx, used below, and the pre-2023 legacy one: 2 = u8, 3 = i32) when the declared
 *     type names the model's real input type; the byte length must equal
 *     prod(dims) * element size. An INT8 model input also accepts WASI_NN_TYPE_U8.
 *   - get_output with a too-small buffer returns WASI_NN_ERRNO_TOO_LARGE and still writes
 *     the needed size to *written (like WasmEdge), so a guest can retry.
 *   - Bad handles, bad pointers and type/shape mismatches give INVALID_ARGUMENT; an
 *     unsupported encoding INVALID_ENCODING; an unknown model name NOT_FOUND.
 *   - In the daemon, load_by_name resolves the models the bundle's manifest declares, and
 *     load() accepts raw bytes only if they hash to a declared model. Under
 *     `wasmgate run-guest`, --nn-preload NAME:ENCODING:TARGET:PATH defines the names.
 *
 * This header is compatible with the wasi-nn block of wasmgate.h (either order works).
 */
#ifndef WASMGATE_WASI_NN_H
#define WASMGATE_WASI_NN_H

#include <stdint.h>

#define WASI_NN_IMPORT(n) __attribute__((import_module("wasi_ephemeral_nn"), import_name(n)))

#ifndef WG_HAVE_WASI_NN
#define WG_HAVE_WASI_NN
typedef uint32_t wasi_nn_graph;
typedef uint32_t wasi_nn_context;

/* The 20-byte tensor record passed to set_input. */
typedef struct {
    const uint32_t *dims; /* offset 0: dimensions (u32 each) */
    uint32_t rank;        /* offset 4: number of dimensions */
    uint8_t type;         /* offset 8 (+3 padding): a WASI_NN_TYPE_* value */
    const uint8_t *data;  /* offset 12: raw little-endian elements, row-major */
    uint32_t data_len;    /* offset 16: bytes */
} wasi_nn_tensor;

/* tensor_type, current witx numbering (wasmtime, wasi-nn crate 0.6, WasmEdge >= 0.15). */
#define WASI_NN_TYPE_F16 0
#define WASI_NN_TYPE_F32 1
#define WASI_NN_TYPE_F64 2
#define WASI_NN_TYPE_U8 3
#define WASI_NN_TYPE_I32 4
#define WASI_NN_TYPE_I64 5

WASI_NN_IMPORT("load_by_name")
int32_t wasi_nn_load_by_name(const char *name, uint32_t name_len, wasi_nn_graph *graph);
WASI_NN_IMPORT("init_execution_context")
int32_t wasi_nn_init_execution_context(wasi_nn_graph graph, wasi_nn_context *ctx);
WASI_NN_IMPORT("set_input")
int32_t wasi_nn_set_input(wasi_nn_context ctx, uint32_t index, const wasi_nn_tensor *tensor);
WASI_NN_IMPORT("compute")
int32_t wasi_nn_compute(wasi_nn_context ctx);
WASI_NN_IMPORT("get_output")
int32_t wasi_nn_get_output(wasi_nn_context ctx, uint32_t index, uint8_t *buf, uint32_t buf_max_len,
                           uint32_t *bytes_written);
#endif /* WG_HAVE_WASI_NN */

/* Legacy (pre-2023-08 spec, wasi-nn crate <= 0.5, WasmEdge 0.13/0.14) values that differ. */
#define WASI_NN_TYPE_LEGACY_U8 2
#define WASI_NN_TYPE_LEGACY_I32 3

/* graph_encoding: wasmgate runs onnx and tensorflowlite (autodetect picks one of them). */
#define WASI_NN_ENCODING_OPENVINO 0
#define WASI_NN_ENCODING_ONNX 1
#define WASI_NN_ENCODING_TENSORFLOW 2
#define WASI_NN_ENCODING_PYTORCH 3
#define WASI_NN_ENCODING_TENSORFLOWLITE 4
#define WASI_NN_ENCODING_AUTODETECT 5

/* execution_target */
#define WASI_NN_TARGET_CPU 0
#define WASI_NN_TARGET_GPU 1
#define WASI_NN_TARGET_TPU 2

/* nn_errno */
#define WASI_NN_ERRNO_SUCCESS 0
#define WASI_NN_ERRNO_INVALID_ARGUMENT 1
#define WASI_NN_ERRNO_INVALID_ENCODING 2
#define WASI_NN_ERRNO_MISSING_MEMORY 3
#define WASI_NN_ERRNO_BUSY 4
#define WASI_NN_ERRNO_RUNTIME_ERROR 5
#define WASI_NN_ERRNO_UNSUPPORTED_OPERATION 6
#define WASI_NN_ERRNO_TOO_LARGE 7
#define WASI_NN_ERRNO_NOT_FOUND 8
/* WasmEdge: compute_single has no further step (wasmgate: after a model's one step). */
#define WASI_NN_ERRNO_END_OF_SEQUENCE 100

/* One part of a model given to load(): ONNX and TFLite use exactly one (the file bytes). */
typedef struct {
    const uint8_t *buf; /* offset 0 */
    uint32_t len;       /* offset 4 */
} wasi_nn_graph_builder;

WASI_NN_IMPORT("load")
int32_t wasi_nn_load(const wasi_nn_graph_builder *builders, uint32_t builders_len, uint32_t encoding,
                     uint32_t target, wasi_nn_graph *graph);
/* WasmEdge extensions (wasmgate provides both). */
WASI_NN_IMPORT("unload")
int32_t wasi_nn_unload(wasi_nn_graph graph);
WASI_NN_IMPORT("finalize_execution_context")
int32_t wasi_nn_finalize_execution_context(wasi_nn_context ctx);
/* load_by_name with a JSON object of backend options (WasmEdge's GGML keys are accepted and
 * ignored; the config must be empty or strict JSON of at most 64 KiB). */
WASI_NN_IMPORT("load_by_name_with_config")
int32_t wasi_nn_load_by_name_with_config(const char *name, uint32_t name_len, const char *config,
                                         uint32_t config_len, wasi_nn_graph *graph);
/* Single-step calls: a wasmgate model has one step, so the first compute_single runs it,
 * the next returns WASI_NN_ERRNO_END_OF_SEQUENCE until fini_single or a new set_input. */
WASI_NN_IMPORT("compute_single")
int32_t wasi_nn_compute_single(wasi_nn_context ctx);
WASI_NN_IMPORT("get_output_single")
int32_t wasi_nn_get_output_single(wasi_nn_context ctx, uint32_t index, uint8_t *out_buffer,
                                  uint32_t out_buffer_max_size, uint32_t *bytes_written);
WASI_NN_IMPORT("fini_single")
int32_t wasi_nn_fini_single(wasi_nn_context ctx);

#endif /* WASMGATE_WASI_NN_H */
