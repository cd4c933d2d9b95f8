"""The defaults of a run, declared once: the CLI, `EvalConfig`, calibration and load read them here."""

from __future__ import annotations

MODEL = "gemma3-270m"
"""The embedded default model: installed offline by `make setup`."""
SCHEMES = ("bf16", "awq-w4a16", "w4a16-rtn", "fp8-dynamic")
CALIBRATIONS = ("ko70", "en100")
CALIB_SAMPLES = 48
"""Calibration samples: 48 × 384 tokens keeps the default first run within the hour on a 2-core
AVX2-only CPU, where the two AWQ builds took 19.5 min each over 64 × 384 (README, "CPU kinds")."""
CALIB_SEQ_LEN = 384
"""Tokens per calibration sample."""
TASKS = ("kmmlu", "mmlu")
LIMIT = 300
"""Items per task at most."""
CPU_PROFILE = "cpu-small"
"""The serve profile on CPU, and where a machine without a GPU scores items for a GPU target."""
SEED = 1234
CONCURRENCY = 8
"""Scoring requests in flight."""
LOAD_DURATION_S = 30.0
EXECUTORS = ("local", "ray")
"""Where `kqe eval` evaluates checkpoints (`kqe.pipeline.executors`); the first is the default."""
