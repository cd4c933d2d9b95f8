"""The defaults of a run, declared once: the CLI, `EvalConfig`, calibration and load read them here."""

from __future__ import annotations

MODEL = "gemma3-270m"
"""The embedded default model: installed offline by `make setup`."""
SCHEMES = ("bf16", "awq-w4a16", "w4a16-rtn", "fp8-dynamic")
CALIBRATIONS = ("ko70", "en100")
CALIB_SAMPLES = 48
"""Calibration samples: 48 × 384 tokens keeps the default first run within the hour on a 2-core
AVX2-only CPU, where the two AWQ builds took 19.5 min each over 64 × 384 (docs/cpu.md)."""
MAX_CALIB_SAMPLES = 65_536
"""The most calibration samples a set may ask for (about 1,400 times the default): a larger count is
a typo, refused before any source is read rather than cut (or counted down) for hours."""
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
PARALLEL_TEXT_SETS = ("faq_ko", "faq_en")
"""Held-out perplexity text sets holding the same documents in Korean and English (the Debian FAQ's
chapters 13–14, `calibration_data/sources.toml`): scored whole, paired section by section."""
MULTIPLICITY = ("holm-per-checkpoint", "holm", "bh")
"""How accuracy p-values are adjusted for many tests (`kqe eval --multiplicity`); the first is the
default: Holm across one checkpoint's tasks; `holm` / `bh` across every checkpoint × task of the run."""
PPL_MARGIN_PCT = 1.0
"""Perplexity increase taken as acceptable in the perplexity verdicts, percent."""
RAG_CONDITIONS = ("retrieved", "oracle", "depth", "closed_book")
"""ko_rag's conditions, in the order they are scored and reported (`evals/tasks/ko_rag/sweep.py` says
what each one puts in the context); `kqe eval --rag-conditions` names some of them."""
RAG_DEFAULT_CONDITIONS = ("retrieved", "oracle", "closed_book")
"""The oracle tells a reading loss from a retrieval miss, at the retrieved condition's cost again;
closed-book prompts are a few dozen tokens. The depth grid costs five times the oracle: asked for."""
