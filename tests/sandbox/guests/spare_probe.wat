;; Spare-instance probe. Payload byte 0 picks what to do:
;; 0: output the old value of a global and of a heap word, then bump both (state probe);
;; 1: sleep u32 ms (payload bytes 1..4) in poll_oneoff, then output "slept";
;; 2: loop forever (only the epoch deadline stops it);
;; 3: memory.grow by u32 pages (payload bytes 1..4), output its i32 result.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasmgate" "set_output" (func $out (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $g (mut i32) (i32.const 0))
  (data (i32.const 3000) "slept")
  (func (export "wasmgate_abi_version") (result i32) (i32.const 1))
  (func (export "wasmgate_alloc") (param i32) (result i32) (i32.const 4096))
  (func $arg (param $p i32) (result i32) (i32.load (i32.add (local.get $p) (i32.const 1))))
  (func $sleep_ms (param $ms i32)
    (i32.store (i32.const 272) (i32.const 1))                 ;; monotonic clock
    (i64.store (i32.const 280) (i64.mul (i64.extend_i32_u (local.get $ms)) (i64.const 1000000)))
    (drop (call $poll (i32.const 256) (i32.const 512) (i32.const 1) (i32.const 600))))
  (func (export "wasmgate_handle") (param $p i32) (param $n i32) (result i32)
    (local $m i32)
    (local.set $m (i32.load8_u (local.get $p)))
    (if (i32.eq (local.get $m) (i32.const 1)) (then
      (call $sleep_ms (call $arg (local.get $p)))
      (drop (call $out (i32.const 3000) (i32.const 5)))
      (return (i32.const 0))))
    (if (i32.eq (local.get $m) (i32.const 2)) (then (loop $l (br $l))))
    (if (i32.eq (local.get $m) (i32.const 3)) (then
      (i32.store (i32.const 2048) (memory.grow (call $arg (local.get $p))))
      (drop (call $out (i32.const 2048) (i32.const 4)))
      (return (i32.const 0))))
    (i32.store (i32.const 2048) (global.get $g))
    (i32.store (i32.const 2052) (i32.load (i32.const 1024)))
    (global.set $g (i32.add (global.get $g) (i32.const 1)))
    (i32.store (i32.const 1024) (i32.add (i32.load (i32.const 1024)) (i32.const 1)))
    (drop (call $out (i32.const 2048) (i32.const 8)))
    (i32.const 0)))
