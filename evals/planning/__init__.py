"""Memory before serving: the vLLM memory model, GPUs, `kqe plan` and `kqe choose`."""
