"""HTTP bridge: KServe V2 / Open Inference Protocol, raw adapter endpoint, management, metrics.

The only place in the daemon that knows HTTP status codes.
"""
