"""`kqe doctor`: a vLLM log (any release 0.5-0.32) read for the cause of a failed or starved start-up.

`messages` is the registry of vLLM's and PyTorch's messages, `log_scan` finds them in a log, `judges`
and `kv_pressure` turn what was found into findings, `diagnose` orders them into one diagnosis."""
