"""The wasmgate daemon: backends, batcher, registry, service, bridges, config and the CLI.

Nothing outside this package imports it except the CLI entry point.
"""
