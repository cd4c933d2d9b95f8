"""ko-quant-eval: what AWQ/FP8 costs a Korean LLM on vLLM, whether the loss is real, and what it buys."""

from importlib import metadata

__version__ = metadata.version("ko-quant-eval")
