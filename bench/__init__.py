"""wasmgate benchmarks: every figure is printed next to a baseline measured in the same run."""
