"""wasmgate.device_profiles."""
