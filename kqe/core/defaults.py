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
TASKS = ("kmmlu", "mmlu", "ko_rag")
"""The default run scores letter choice on Korean and English knowledge and a slice of Korean RAG
(RAG_DEFAULT_*): generated answers, so divergence and fidelity move where accuracy does not."""
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
PARALLEL_TEXT_SETS = {"faq": ("faq_ko", "faq_en"), "lo": ("lo_ko", "lo_en")}
"""Name → (Korean, English) held-out perplexity text sets holding the same documents in both languages
(`calibration_data/sources.toml`): the Debian FAQ's chapters 13–14 section by section, LibreOffice's
help page by page. Scored whole, so both languages stop at the same content; the name is the
`ppl_<name>_gap_pct` column's."""
MULTIPLICITY = ("holm-per-checkpoint", "holm", "bh")
"""How accuracy p-values are adjusted for many tests (`kqe eval --multiplicity`); the first is the
default: Holm across one checkpoint's tasks; `holm` / `bh` across every checkpoint × task of the run."""
PPL_MARGIN_PCT = 1.0
"""Perplexity increase taken as acceptable in the perplexity verdicts, percent."""
RAG_CONDITIONS = ("retrieved", "oracle", "depth", "closed_book")
"""ko_rag's conditions, in the order they are scored and reported (`evals/tasks/ko_rag/sweep.py` says
what each one puts in the context); `kqe eval --rag-conditions` names some of them."""
RAG_DEFAULT_CONDITIONS = ("retrieved", "closed_book")
"""The default slice: what a deployed RAG system reads, and what the checkpoint answers from memory
(closed-book prompts are a few dozen tokens). The oracle tells a reading loss from a retrieval miss at
the retrieved condition's cost again, the depth grid at five times that: asked for."""
RAG_LENGTHS = {"1k": 1024, "2k": 2048, "4k": 4096, "16k": 16384}
"""ko_rag's context lengths: label -> tokens of the whole request. Fixed, because the leaderboard has a
column per label; `kqe eval --rag-lengths` names some of them."""
RAG_DEFAULT_LENGTHS = ("1k",)
"""The default slice's one length: the shortest, where the 4-bit checkpoints' reading losses already
show (docs/performance.md#ko_rag) at a third of 4k's cost."""
RAG_DEFAULT_QUESTIONS = 40
"""ko_rag questions the default run draws (seeded): on gemma3-270m 40 questions resolved the 4-bit
checkpoints' ΔF1 at 1k (a CI below 0) and keep the first run within its budget (docs/performance.md)."""
