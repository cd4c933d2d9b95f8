"""Calibration sets, the scheme registry and checkpoint builds (llmcompressor)."""
