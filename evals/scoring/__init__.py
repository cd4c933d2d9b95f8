"""Scoring through the server: letter-choice log-probs, generation, perplexity, one resumable pass."""
