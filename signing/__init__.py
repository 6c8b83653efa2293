"""wasmgate.signing."""
