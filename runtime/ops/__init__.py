"""What an operator touches: config, logs, metrics, systemd, the unit file."""
