//! digits-zig — the digits example written in Zig: a second language on the same ABI.
//!
//! Payload: 64 raw bytes (0..255 grayscale) or a JSON array of 64 numbers (0..16).
//! Answer: {"digit": d, "confidence": p}; low confidence asks for cloud fallback.
//! Build: wasmgate adapter build . --out adapter.wasm (runs `zig build-exe`, see README).
const std = @import("std");

// ---- Guest ABI v1 host imports (see sdk/wasmgate.h for the contract) ----
extern "wasmgate" fn set_output(ptr: [*]const u8, len: i32) i32;
extern "wasmgate" fn request_fallback(ptr: [*]const u8, len: i32) void;
extern "wasmgate" fn meta(key: [*]const u8, key_len: i32, buf: [*]u8, cap: i32, written: *i32) i32;

// ---- wasi-nn preview1 (witx) imports ----
const Tensor = extern struct { dims: [*]const u32, rank: u32, ty: u8, data: [*]const u8, data_len: u32 };
const TYPE_F32: u8 = 1;
extern "wasi_ephemeral_nn" fn load_by_name(name: [*]const u8, len: u32, graph: *u32) i32;
extern "wasi_ephemeral_nn" fn init_execution_context(graph: u32, ctx: *u32) i32;
extern "wasi_ephemeral_nn" fn set_input(ctx: u32, index: u32, tensor: *const Tensor) i32;
extern "wasi_ephemeral_nn" fn compute(ctx: u32) i32;
extern "wasi_ephemeral_nn" fn get_output(ctx: u32, index: u32, buf: [*]u8, cap: u32, written: *u32) i32;

const PIXELS = 64;
const CLASSES = 10;
// One fixed arena per request: the instance is fresh, so nothing needs freeing.
var arena_buf: [64 * 1024]u8 = undefined;

export fn wasmgate_abi_version() i32 {
    return 1;
}

export fn wasmgate_alloc(size: i32) i32 {
    if (size < 0) return 0;
    const buf = std.heap.wasm_allocator.alloc(u8, @intCast(@max(size, 1))) catch return 0;
    return @intCast(@intFromPtr(buf.ptr));
}

fn reply(status: i32, text: []const u8) i32 {
    _ = set_output(text.ptr, @intCast(text.len));
    return status;
}

fn threshold() f64 {
    const key = "param.confidence_threshold";
    var buf: [32]u8 = undefined;
    var n: i32 = 0;
    if (meta(key.ptr, key.len, &buf, buf.len, &n) != 0 or n < 0 or n > buf.len) return 0.7;
    return std.fmt.parseFloat(f64, buf[0..@intCast(n)]) catch 0.7;
}

fn readPixels(payload: []const u8, px: *[PIXELS]f32) ?[]const u8 {
    if (payload.len == PIXELS and payload[0] != '[') {
        for (payload, 0..) |b, i| px[i] = @as(f32, @floatFromInt(b)) * (16.0 / 255.0);
        return null;
    }
    var fba = std.heap.FixedBufferAllocator.init(&arena_buf);
    const parsed = std.json.parseFromSliceLeaky([]f32, fba.allocator(), payload, .{}) catch
        return "payload must be 64 raw bytes or a JSON array of 64 numbers";
    if (parsed.len != PIXELS) return "expected 64 numbers (8x8, 0..16)";
    for (parsed, 0..) |v, i| {
        if (!(v >= 0 and v <= 16)) return "pixel values must be 0..16";
        px[i] = v;
    }
    return null;
}

fn classify(px: *const [PIXELS]f32, probs: *[CLASSES]f32) i32 {
    const name = "digits-zig-mlp"; // model names are daemon-wide and share the V2 namespace with adapters
    const dims = [_]u32{ 1, PIXELS };
    var graph: u32 = 0;
    var ctx: u32 = 0;
    var written: u32 = 0;
    var e = load_by_name(name.ptr, name.len, &graph);
    if (e == 0) e = init_execution_context(graph, &ctx);
    const t = Tensor{ .dims = &dims, .rank = 2, .ty = TYPE_F32, .data = @ptrCast(px), .data_len = PIXELS * 4 };
    if (e == 0) e = set_input(ctx, 0, &t);
    if (e == 0) e = compute(ctx);
    if (e == 0) e = get_output(ctx, 0, @ptrCast(probs), CLASSES * 4, &written);
    if (e == 0 and written != CLASSES * 4) e = 5;
    return e;
}

export fn wasmgate_handle(ptr: i32, len: i32) i32 {
    if (len < 0 or (ptr == 0 and len > 0)) return reply(2, "invalid payload pointer");
    const payload: []const u8 = if (len == 0) "" else @as([*]const u8, @ptrFromInt(@as(usize, @intCast(ptr))))[0..@intCast(len)];
    var px: [PIXELS]f32 = undefined;
    if (readPixels(payload, &px)) |err| return reply(1, err);
    var probs: [CLASSES]f32 = undefined;
    if (classify(&px, &probs) != 0) return reply(2, "digits model failed");
    var best: usize = 0;
    for (probs, 0..) |p, i| if (p > probs[best]) {
        best = i;
    };
    if (probs[best] < threshold()) request_fallback("low confidence", "low confidence".len);
    var out: [64]u8 = undefined;
    const text = std.fmt.bufPrint(&out, "{{\"digit\":{d},\"confidence\":{d:.6}}}", .{ best, probs[best] }) catch
        return reply(2, "answer too large");
    return reply(0, text);
}
