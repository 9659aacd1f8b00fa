"""Design-space exploration: sweeps over `--set` keys and kernel parameters (`sweep`)."""
