;; A malicious daemon adapter: payload byte 0 picks the attack; 0 is a well-behaved echo.
(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sched_yield" (func $yield (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_accept" (func $sock_accept (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_send" (func $sock_send (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasmgate" "set_output" (func $set_output (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "/etc/passwd")
  (data (i32.const 16) "etc/passwd")
  (func (export "wasmgate_abi_version") (result i32) (i32.const 1))
  (func (export "wasmgate_alloc") (param i32) (result i32) (i32.const 4096))
  (func $recurse (param i32) (result i32) (call $recurse (i32.add (local.get 0) (i32.const 1))))
  (func $sleep10s
    (i32.store (i32.const 272) (i32.const 1))                 ;; monotonic clock
    (i64.store (i32.const 280) (i64.const 10000000000))       ;; 10 s, relative
    (drop (call $poll (i32.const 256) (i32.const 512) (i32.const 1) (i32.const 600))))
  (func $out2 (param i32 i32) (result i32)
    (i32.store (i32.const 700) (local.get 0))
    (i32.store (i32.const 704) (local.get 1))
    (drop (call $set_output (i32.const 700) (i32.const 8)))
    (i32.const 0))
  (func (export "wasmgate_handle") (param $p i32) (param $n i32) (result i32)
    (local $m i32)
    (local.set $m (i32.load8_u (local.get $p)))
    (if (i32.eq (local.get $m) (i32.const 1)) (then (loop $l (br $l))))
    (if (i32.eq (local.get $m) (i32.const 2)) (then
      (loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))
      (unreachable)))
    (if (i32.eq (local.get $m) (i32.const 3)) (then (return (call $recurse (i32.const 0)))))
    (if (i32.eq (local.get $m) (i32.const 4)) (then (unreachable)))
    (if (i32.eq (local.get $m) (i32.const 5)) (then (call $exit (i32.const 3))))
    (if (i32.eq (local.get $m) (i32.const 6)) (then (loop $l (call $sleep10s) (br $l))))
    (if (i32.eq (local.get $m) (i32.const 7)) (then (return (call $out2
      (call $path_open (i32.const 3) (i32.const 0) (i32.const 16) (i32.const 10) (i32.const 0)
                       (i64.const 2) (i64.const 2) (i32.const 0) (i32.const 800))
      (call $path_open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 11) (i32.const 0)
                       (i64.const 2) (i64.const 2) (i32.const 0) (i32.const 800))))))
    (if (i32.eq (local.get $m) (i32.const 8)) (then (return (call $out2
      (call $sock_accept (i32.const 3) (i32.const 0) (i32.const 800))
      (call $sock_send (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 800))))))
    (if (i32.eq (local.get $m) (i32.const 9)) (then
      (drop (call $set_output (i32.const 0) (i32.const 0x200000))) (return (i32.const 0))))
    (if (i32.eq (local.get $m) (i32.const 10)) (then
      (drop (call $set_output (i32.const 0xFFFFFF00) (i32.const 16))) (return (i32.const 0))))
    (if (i32.eq (local.get $m) (i32.const 11)) (then (return (i32.const 7))))
    (if (i32.eq (local.get $m) (i32.const 12)) (then (loop $l (drop (call $yield)) (br $l))))
    (if (i32.eq (local.get $m) (i32.const 13)) (then (return (i32.load (i32.const 0x7FFFFFF0)))))
    (if (i32.eq (local.get $m) (i32.const 14)) (then (call $sleep10s) (return (i32.const 0))))
    (if (i32.eq (local.get $m) (i32.const 15)) (then (return  ;; rights no WASI host accepts
      (call $path_open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 11) (i32.const 0)
                       (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 800)))))
    (drop (call $set_output (local.get $p) (local.get $n)))
    (i32.const 0)))
