"""Scores of a result against ground truth: model-probability errors, cross-entropies, traces."""
