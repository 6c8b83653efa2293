"""wasmgate.sandbox."""
