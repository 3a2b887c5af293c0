"""Transport reversible jump (TRJ paper): per-model transports, the TRJ jump and the Bartolucci bridge estimator."""
