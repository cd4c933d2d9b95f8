"""Serving capacity under load (`kqe load`) and the long Korean prompts it sends."""
