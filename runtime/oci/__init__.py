"""The OCI registry client (ORAS): bundles for the fleet, samples for the field."""
