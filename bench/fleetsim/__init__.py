"""``python -m bench fleet-sim``: thousands of simulated gateways on the real fleet code path."""
