"""The control plane over data-plane worker processes (docs/architecture.md, "Processes and
CPUs"). Nothing below the composition root imports it (`lint-imports`)."""
