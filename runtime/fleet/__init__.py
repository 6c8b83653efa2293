"""The fleet: desired state over MQTT, bundles from an OCI registry, rollouts in waves."""
