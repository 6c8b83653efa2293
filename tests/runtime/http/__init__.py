"""Tests of the HTTP bridge: KServe V2, raw adapters, errors, metrics, status page."""
