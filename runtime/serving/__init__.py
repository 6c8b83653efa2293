"""Serving a request: the service, admission, execution, batching."""
