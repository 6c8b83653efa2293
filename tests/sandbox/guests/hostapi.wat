;; Exercises the wasmgate host module's edges: payload byte 0 picks the case.
(module
  (import "wasmgate" "set_output" (func $set_output (param i32 i32) (result i32)))
  (import "wasmgate" "log" (func $log (param i32 i32 i32)))
  (import "wasmgate" "request_fallback" (func $fallback (param i32 i32)))
  (import "wasmgate" "meta" (func $meta (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasmgate" "emit_event" (func $emit (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "adapter")
  (data (i32.const 16) "param.threshold")
  (data (i32.const 48) "nope")
  (data (i32.const 64) "0123456789abcdef0123456789abcdef")
  (func (export "wasmgate_abi_version") (result i32) (i32.const 1))
  (func (export "wasmgate_alloc") (param $n i32) (result i32)
    ;; payload byte sizes above 60000 get a pointer that runs off the end of memory
    (if (result i32) (i32.gt_u (local.get $n) (i32.const 60000))
      (then (i32.const 65000)) (else (i32.const 4096))))
  (func $meta3 (result i32)
    ;; out: [rc adapter, written], [rc threshold cap 2, written], [rc nope]
    (i32.store (i32.const 1000) (call $meta (i32.const 0) (i32.const 7) (i32.const 1100) (i32.const 64) (i32.const 1004)))
    (i32.store (i32.const 1008) (call $meta (i32.const 16) (i32.const 15) (i32.const 1200) (i32.const 2) (i32.const 1012)))
    (i32.store (i32.const 1016) (call $meta (i32.const 48) (i32.const 4) (i32.const 1300) (i32.const 64) (i32.const 1020)))
    (drop (call $set_output (i32.const 1000) (i32.const 24)))
    (i32.const 0))
  (func (export "wasmgate_handle") (param $p i32) (param $n i32) (result i32)
    (local $m i32) (local $i i32)
    (local.set $m (i32.load8_u (local.get $p)))
    (if (i32.eq (local.get $m) (i32.const 1)) (then (return (call $meta3))))
    (if (i32.eq (local.get $m) (i32.const 2)) (then   ;; log flood: 1000 x 32 bytes
      (loop $l
        (call $log (i32.const 2) (i32.const 64) (i32.const 32))
        (br_if $l (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1))) (i32.const 1000))))
      (return (i32.const 0))))
    (if (i32.eq (local.get $m) (i32.const 3)) (then   ;; event flood: count refused ones
      (loop $l
        (local.set $m (i32.add (local.get $m) (call $emit (i32.const 64) (i32.const 4))))
        (br_if $l (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1))) (i32.const 100))))
      (i32.store (i32.const 1000) (local.get $m))
      (drop (call $set_output (i32.const 1000) (i32.const 4)))
      (return (i32.const 0))))
    (if (i32.eq (local.get $m) (i32.const 4)) (then
      (call $fallback (i32.const 64) (i32.const 10))
      (drop (call $set_output (i32.const 64) (i32.const 3)))
      (return (i32.const 2))))
    (if (i32.eq (local.get $m) (i32.const 5)) (then   ;; a too-large output, then a small one
      (drop (call $set_output (i32.const 0) (i32.const 60000)))
      (drop (call $set_output (i32.const 64) (i32.const 4)))
      (return (i32.const 0))))
    (if (i32.eq (local.get $m) (i32.const 6)) (then   ;; stdout without a final newline
      (i32.store (i32.const 1500) (i32.const 64)) (i32.store (i32.const 1504) (i32.const 5))
      (drop (call $fd_write (i32.const 1) (i32.const 1500) (i32.const 1) (i32.const 1508)))
      (return (i32.const 0))))
    (if (i32.eq (local.get $m) (i32.const 7)) (then   ;; bad pointer to log
      (call $log (i32.const 1) (i32.const 0xFFFFFFF0) (i32.const 100)) (return (i32.const 0))))
    (i32.const 0)))
