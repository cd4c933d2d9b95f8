"""Paired statistics on per-item results: comparisons, pairing, averages and their CIs."""
