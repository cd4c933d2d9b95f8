"""ko-quant-eval: what AWQ/FP8 costs a Korean LLM on vLLM, whether the loss is real, and what it buys."""

__version__ = "0.1.0"
