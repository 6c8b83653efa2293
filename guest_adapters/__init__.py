"""wasmgate.guest_adapters."""
