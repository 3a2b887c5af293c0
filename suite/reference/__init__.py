"""Ground truth for the benchmark: exact answers, or SMC evidences and NUTS draws, stored with their error."""
