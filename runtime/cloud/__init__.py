"""Cloud fallback: the KServe V2 client, the per-bundle policy, the breaker."""
