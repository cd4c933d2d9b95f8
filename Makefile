# ko-quant-eval: `make eval` (see README.md). It, `make test` and the other targets bring the environment
# up first: scripts/setup.sh is idempotent and takes seconds when nothing changed (`make setup` alone
# does just that).
MODEL ?= gemma3-270m
SCHEMES ?= bf16,awq-w4a16,w4a16-rtn,fp8-dynamic
CALIB ?= ko70,en100
TASKS ?= kmmlu,mmlu,ko_rag
LIMIT ?=
PROFILE ?=
TARGET_GPU ?=
SCORE_PROFILE ?=
EXTRA ?=
RUN ?=
RECIPES ?=
KV ?=
EVAL_FLAGS ?=
EXECUTOR ?= local
RAY_HEAD ?=
KQE ?= .venv/bin/kqe

.PHONY: setup eval test test-fast lint bench docs

setup:
	@bash scripts/setup.sh

eval: setup
	$(KQE) eval --model '$(MODEL)' --schemes '$(SCHEMES)' --calibration '$(CALIB)' \
	  --tasks '$(TASKS)' $(if $(LIMIT),--limit '$(LIMIT)') --profile '$(PROFILE)' \
	  --target-gpu '$(TARGET_GPU)' --score-profile '$(SCORE_PROFILE)' --extra '$(EXTRA)' --recipes '$(RECIPES)' --run '$(RUN)' \
	  $(if $(KV),--kv-cache-dtypes '$(KV)') \
	  --executor '$(EXECUTOR)' --ray-address '$(RAY_HEAD)' $(EVAL_FLAGS)

# Two pytest workers (pytest-xdist): most of the suite's time waits on vLLM servers starting and stopping,
# so two test files run at a time (tests/conftest.py keeps those sharing a long fixture together);
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
PYTEST = .venv/bin/python -m pytest -q $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS))
test: setup
	$(PYTEST)

test-fast: setup
	$(PYTEST) -m "not slow"

lint: setup
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy

# Benchmarks, not tests (not in `make test`): the suite against lm-eval (hf and in-process vllm), a bare
# llmcompressor script (BENCH_SCHEMES), its own first run, and a matrix on the local vs the Ray executor,
# same items and machine, as one table in results/bench.csv (BENCH_FLAGS=--quick: fewer items and runs);
# then the statistics simulation (results/bench/). Each appends its rows to results/measurements.jsonl too
# (`make docs` renders them into docs/performance.md). lm-eval goes into the serve venv too, for its vllm
# backend (it pins nothing vLLM needs); the ray extra into the core venv, for the executor row.
BENCH_SCHEMES ?= fp8-dynamic,awq-w4a16
BENCH_FLAGS ?=
bench: setup
	@.venv-serve/bin/python -c "import lm_eval" 2>/dev/null || .venv-serve/bin/pip install -q lm-eval==0.4.13
	@.venv/bin/python -c "import ray" 2>/dev/null || .venv/bin/pip install -q --no-deps -r requirements/ray.txt
	.venv/bin/python -m bench.suite_bench --quantize-schemes '$(BENCH_SCHEMES)' $(BENCH_FLAGS)
	.venv/bin/python -m bench.continuation_bench
	.venv/bin/python -m bench.stats_bench

# The generated docs: the leaderboard column table in docs/leaderboard.md (from
# evals/reporting/leaderboard_row.py:LeaderboardRow) and docs/performance.md (from
# results/measurements.jsonl, where `make bench` appends); tests/test_docs.py fails while either is stale.
docs: setup
	.venv/bin/python scripts/docs.py
