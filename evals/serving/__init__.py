"""vLLM as a child process: serve profiles, server lifecycle, its log and metrics, hardware truth, doctor."""
