# ko-quant-eval: `make setup` once, then `make eval` (see README.md).
MODEL ?= gemma3-270m
SCHEMES ?= bf16,awq-w4a16,fp8-dynamic
CALIB ?= ko70,en100
TASKS ?= kmmlu_hard,mmlu
LIMIT ?= 300
PROFILE ?= cpu-small
EVAL_FLAGS ?=
KQE ?= .venv/bin/kqe

.PHONY: setup eval test test-fast lint bench docs

setup:
	bash scripts/setup.sh

$(KQE):
	@echo "kqe is not installed in .venv: run \`make setup\` first" >&2; exit 2

eval: $(KQE)
	$(KQE) eval --model '$(MODEL)' --schemes '$(SCHEMES)' --calibration '$(CALIB)' \
	  --tasks '$(TASKS)' --limit '$(LIMIT)' --profile '$(PROFILE)' $(EVAL_FLAGS)

test: $(KQE)
	.venv/bin/python -m pytest -q

test-fast: $(KQE)
	.venv/bin/python -m pytest -q -m "not slow"

lint: $(KQE)
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy

# Benchmarks, not tests: statistics coverage/false-positive simulation and speed (writes results/bench/).
bench: $(KQE)
	.venv/bin/python -m bench.stats_bench

# The leaderboard column table in README.md, generated from kqe/records.py:LeaderboardRow.
docs: $(KQE)
	.venv/bin/python scripts/readme_columns.py
