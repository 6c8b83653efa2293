"""The shared vocabulary of what is served, at the bottom of `wasmgate.runtime`: requests
and answers (`api`), deadlines (`timeouts`), bundles as served (`loaded`: `LoadedBundle`,
`ServedModel`, the admission limits and fallback policy). Every layer above speaks it; it
imports nothing of the runtime but `errors` and `ops`."""
