"""Bad input to every subcommand, one table per command: exit 2, one line naming the input, no traceback.

Each case is wrong in one way the user can fix, or is a file a user may pass by mistake or receive from
someone else (`tests/helpers/bad_files.py`): not UTF-8, binary, of the wrong kind, truncated, with NaN,
duplicated rows, links, folders where files belong, broken model and extra configs. None may exit 1
(an internal error) or print a traceback. In each case `{tiny}` is the tiny model, `{d}` the folder of
bad files (the folder the command runs in) and `{repo}` the checkout; KQE_HOME holds sources, so eval
gets past its task data. The first case of each table runs again through the real entry point, in a
subprocess.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import assert_one_line_error, invoke_kqe, run_kqe
from tests.helpers.repo import REPO

Case = tuple[tuple[str, ...], tuple[str, ...]]
"""The command line, and what its one line of error must say."""

BOARD_INPUTS = [
    "binary.csv", "latin1.csv", "nul.csv", "empty.csv", "header-only.csv", "not-csv.csv", "dup-row.csv",
    "nan-ci.csv", "inf-cell.csv", "word-in-number.csv", "mixed-schema.csv", "short-row.csv", "long-row.csv",
    "a-folder.csv", "dangling.csv", "missing.csv", "a-fifo.csv", "huge.csv", "/dev/zero",
]  # fmt: skip
NOT_READ = {
    "a-fifo.csv": "not a regular file",
    "huge.csv": "larger than 64 MiB",
    "/dev/zero": "not a regular file",
}
"""Inputs no reader may read whole (or wait on), and what it says instead."""
ITEM_FILES = (
    "bad.jsonl", "not-items.jsonl", "nan-items.jsonl", "array.jsonl", "empty.jsonl", "a-folder.csv",
    "missing.jsonl", "a-fifo.csv", "huge.csv", "/dev/zero",
)  # fmt: skip
RECIPE_FILES = (
    "recipes-binary.toml", "recipes-latin1.toml", "recipes-wrong-type.toml", "recipes-not-table.toml",
    "recipes-bad-syntax.toml", "a-folder.csv", "missing.toml", "a-fifo.csv", "/dev/zero",
)  # fmt: skip


def at(name: str) -> str:
    """A bad input by name: a file of `{d}`, or an absolute path (a device) as it is."""
    return name if name.startswith("/") else f"{{d}}/{name}"


def naming(name: str) -> tuple[str, ...]:
    """What the one line of error about the bad input `name` must say: its name (and, for one that is
    never read whole, why)."""
    return (name, NOT_READ[name]) if name in NOT_READ else (name,)


LM_X = ("--tasks", "lm-eval:x")
HUGE_COUNTS = ("65537", "1000000000", "9223372036854775807", "99999999999999999999999")
"""Sample counts above the most kqe cuts (2^16), up to past 2^64: refused at once, never counted down."""
GOOD = ("--leaderboard", "{d}/good.csv", "--gpu", "rtx4090")
PLAN = ("plan", "--model", "gemma3-270m", "--gpu", "rtx4090")
PLAN_14B = ("plan", "--model", "qwen2.5-14b")


def dry_run(*args: str) -> tuple[str, ...]:
    """`kqe eval --dry-run` of the tiny model: every check that needs no build runs, nothing is built."""
    return ("eval", "--model", "{tiny}", *args, "--dry-run")


EVAL: list[Case] = [
    (("eval", "--model", "qwen9-1b"), ("qwen9-1b", "gemma3-270m", "hf:")),
    (("eval", "--model", "./models/not-a-model"), ("not-a-model",)),
    (("eval", "--model", "{tiny}", "--schemes", "bf16,awq-w3"), ("awq-w3", "awq-w4a16")),
    (("eval", "--model", "{tiny}", "--calibration", "ko=0.9,en=0.3"), ("ko=0.9,en=0.3", "1")),
    (("eval", "--model", "{tiny}", "--tasks", "kmmlu,hellaswag"), ("hellaswag", "mmlu")),
    (("eval", "--model", "{tiny}", "--tasks", "kmmlu_redux"), ("LGAI-EXAONE/KMMLU-Redux", "unconfirmed")),
    (("eval", "--model", "{tiny}", "--tasks", "mmmlu_ko,mmlu_en"),
     ("openai/MMMLU is not available offline", "datasets/openai/MMMLU", "KQE_ONLINE=1")),
    (("eval", "--model", "{tiny}", "--profile", "rtx9090"), ("rtx9090", "cpu-small")),
    (("eval", "--model", "{tiny}", "--ray-address", "10.0.0.1:6379"), ("10.0.0.1:6379", "--executor ray")),
    (("eval", "--model", "{tiny}", "--limit", "-1"), ("limit -1",)),
    (("eval", "--model", "{tiny}", "--concurrency", "0"), ("--concurrency", "0")),
    (("eval", "--model", "{tiny}", "--seed", "abc"), ("--seed", "abc")),
    (("eval", "--model", "{tiny}", "--load", "--load-duration-s", "-3"), ("--load-duration-s",)),
    (("eval", "--model", "{tiny}", "--schemes", "awq-w4a16", "--calib-samples", "0"), ("--calib-samples",)),
    (("eval", "--model", "{tiny}", "--calibration", "ko=abc"), ("ko=abc", "ko70")),
    (("eval", "--model", "{d}/models/pickled"), ("pickled", "safetensors")),
    (("eval", "--model", "{d}/models/custom-code"), ("custom-code", "auto_map", "--trust-remote-code")),
    (("eval", "--model", "hf:../../etc"), ("hf:../../etc", "hf:org/name")),
    (("eval", "--model", "hf:just-a-name"), ("hf:just-a-name", "hf:org/name")),
    (("eval", "--model", "{tiny}", "--run", "../elsewhere"), ("../elsewhere", "folder name")),
    (("eval", "--model", "{tiny}", "--rag-conditions", "retrieved,orcale"),
     ("--rag-conditions", "orcale", "retrieved,oracle,depth,closed_book")),
    (("eval", "--model", "{tiny}", "--rag-conditions", ","), ("--rag-conditions", "names no condition")),
    *[(dry_run("--recipes", at(name), "--schemes", "bf16,mine"), naming(name)) for name in RECIPE_FILES],
    (dry_run("--extra", "{d}/missing-extra"), ("missing-extra",)),
    (dry_run("--extra", "hf:org/name"), ("hf:org/name", "revision")),
    (dry_run("--extra", "{d}/extra-broken-json"), ("extra-broken-json", "config.json")),
    (dry_run("--extra", "{d}/broken-config,{d}/x/broken-config"), ("broken-config",)),
    (dry_run("--rag-data", "{d}/rag-missing", "--tasks", "ko_rag"), ("rag-missing",)),
    (dry_run("--rag-data", "{d}/rag-broken", "--tasks", "ko_rag"), ("rag-broken",)),
    (("eval", "--model", "{d}/broken-config", "--dry-run"), ("broken-config", "config.json")),
    (("eval", "--model", "{d}/config-binary", "--dry-run"), ("config-binary", "config.json")),
    (dry_run("--limit", "-1"), ("--limit",)),
    (dry_run("--circular", "-1"), ("--circular -1 is negative", "0 for no CircularEval")),
    (dry_run("--circular", "2.5"), ("--circular '2.5' is not a whole number",)),
    (dry_run("--circular", "9", "--limit", "8", "--tasks", "kmmlu"),
     ("--circular 9 is more than the 8 items kmmlu scores", "--limit")),
    (dry_run("--circular", "3", "--tasks", "ko_rag"),
     ("--circular 3", "no letter-choice task", "leave --circular out")),
    (("eval", "--model", "{tiny}", "--seed", "x"), ("--seed",)),
    (dry_run("--schemes", ""), ("--schemes",)),
    (dry_run("--calibration", ","), (",",)),
    (dry_run("--tasks", ",,"), ("--tasks",)),
    (dry_run("--run", "a/b"), ("a/b",)),
    (dry_run("--gpu-gib", "0"), ("--gpu-gib",)),
    (("eval", "--model", "", "--dry-run"), ("--model",)),
    (("eval", "--model", "hf:org/name@", "--dry-run"), ("hf:org/name@",)),
    (("eval", "--model", "{tiny}", "--tasks", "lm-eval:kobest_copx"), ("kobest_copx", "lm-eval:kobest_copa")),
    (("eval", "--model", "{tiny}", "--tasks", "lm-eval:kormedmcqa"), ("sean0042/KorMedMCQA", "offline")),
    (("eval", "--model", "{tiny}", "--tasks", "lm-eval:wikitext"), ("loglikelihood_rolling",)),
    (("eval", "--model", "{tiny}", "--tasks", "lm-eval:kobest_copa"), ("skt/kobest_v1 (copa)", "offline")),
    (("eval", "--model", "{tiny}", "--include-path", "{d}/models/not-a-model", "--tasks", "lm-eval:x"),
     ("no *.yaml",)),
    *[(dry_run("--calib-samples", count), ("--calib-samples", count, "65536")) for count in HUGE_COUNTS],
    (dry_run("--include-path", "/", *LM_X), ("--include-path /", "for a folder of task YAMLs")),
    (dry_run("--include-path", "{d}/deep-tasks", *LM_X), ("deep-tasks", "too deep", "more than 8 deep")),
]  # fmt: skip
CALIBRATE_TINY = (
    "calibrate",
    "--model",
    "{tiny}",
    "--seq-len",
    "64",
    "--tasks",
    "kmmlu_hard,mmlu",
    "--limit",
    "20",
)
CALIBRATE: list[Case] = [
    (("calibrate", "--model", "{tiny}", "--mix", "ko=2"), ("ko=2", "1")),
    (("calibrate", "--model", "{tiny}", "--tasks", "kmmlu,ko_rag"), ("--tasks ko_rag", "kmmlu")),
    (("calibrate", "--model", "{tiny}", "--out", "{d}/good.csv"), ("good.csv",)),
    (("calibrate", "--model", "{tiny}", "--out", "{d}/good.csv/sets"),  # said before the items are read
     ("--out", "good.csv/sets: cannot write there (Not a directory)")),
    (("calibrate", "--model", "{tiny}", "--out", "/proc/kqe-sets"),
     ("--out /proc/kqe-sets: cannot write there",)),
    (("calibrate", "--model", "{tiny}", "--samples", "0"), ("samples",)),
    (("calibrate", "--model", "{tiny}", "--sources", "nope"), ("nope",)),
    (("calibrate", "--model", "{tiny}", "--tasks", "hellaswag"), ("hellaswag",)),
    ((*CALIBRATE_TINY, "--mix", "ko=0.7,en=0.2"), ("shares sum to 0.9, not 1",)),
    ((*CALIBRATE_TINY, "--mix", "ko=1.2,en=-0.2"), ("share of en is negative",)),
    ((*CALIBRATE_TINY, "--mix", "ko=0.5,ja=0.5"), ("unknown language 'ja'",)),
    ((*CALIBRATE_TINY, "--samples", "5000", "--allow-contamination"), ("at most",)),
    ((*CALIBRATE_TINY, "--seq-len", "4096"),
     ("--seq-len 4096 is above the context of tiny-llama (2048 tokens)",)),
    ((*CALIBRATE_TINY, "--sources", "kobill-holdout"), ("held out for perplexity",)),
    *[(("calibrate", "--model", "{tiny}", "--samples", n), ("--samples", "65536")) for n in HUGE_COUNTS],
]  # fmt: skip
QUANTIZE: list[Case] = [
    (("quantize", "--model", "{tiny}", "--scheme", "nope"), ("nope", "fp8-dynamic")),
    (("quantize", "--model", "{tiny}", "--scheme", "awq-w4a16", "--tasks", "lm-eval:kobest_copa"),
     ("--tasks lm-eval:kobest_copa", "leave")),
    (("quantize", "--model", "{tiny}"), ("give --scheme NAME to build, or --extra FOLDER",)),
    (("quantize", "--model", "{tiny}", "--scheme", "awq"), ("unknown scheme 'awq'", "autoawq-w4a16")),
    (("quantize", "--model", "{tiny}", "--scheme", "w4a16-rtn", "--set", "grup_size=64"),
     ("'grup_size' in --set is not known",)),
    (("quantize", "--model", "{tiny}", "--scheme", "w4a16-rtn", "--set", "group_size=96"),
     ("group_size 96 does not divide",)),
    (("quantize", "--model", "{tiny}", "--extra", "{d}/models/corrupt-shard"),
     ("model.safetensors is corrupt", "re-download")),
    (("quantize", "--model", "{tiny}", "--scheme", "w4a16-rtn", "--set", "group_size"), ("group_size",)),
    (("quantize", "--model", "{tiny}", "--scheme", "w4a16-rtn", "--set", "nope=1"), ("nope",)),
    (("quantize", "--model", "{tiny}", "--extra", "{d}/extra-broken-json"), ("extra-broken-json",)),
    (("quantize", "--model", "{tiny}", "--scheme", "mine", "--recipes", "{d}/recipes-binary.toml"),
     ("recipes-binary.toml",)),
    *[(("quantize", "--model", "{tiny}", "--scheme", "awq-w4a16", "--calib-samples", count),
       ("--calib-samples", "65536")) for count in HUGE_COUNTS],
]  # fmt: skip
PLAN_CASES: list[Case] = [
    (("plan", "--model", "gemma3-270m", "--gpu", "rtx9999"), ("rtx9999", "rtx4090")),
    ((*PLAN, "--count", "3"), ("tensor-parallel-size 3", "1, 2")),
    ((*PLAN, "--gpu-memory-utilization", "1.5"), ("1.5",)),
    ((*PLAN, "--scheme", "awq-w9"), ("awq-w9", "awq-w4a16")),
    (("plan", "--check-logs", "{d}/models"), ("--check-logs", "no *.toml log corpus")),
    *[(("plan", "--model", f"{{d}}/{name}", "--gpu", "rtx4090"), (name, "config.json"))
      for name in ("broken-config", "config-not-object", "config-binary")],
    (("plan", "--model", "gemma3-270m", "--gpu-gib", "nan"), ("--gpu-gib",)),
    (("plan", "--model", "gemma3-270m", "--gpu-gib", "-3"), ("--gpu-gib",)),
    ((*PLAN, "--max-model-len", "0"), ("--max-model-len",)),
    ((*PLAN, "--max-num-seqs", "-1"), ("--max-num-seqs",)),
    ((*PLAN, "--kv-cache-dtype", "fp3"), ("fp3",)),
    ((*PLAN, "--kv-cache-gib", "nan"), ("--kv-cache-gib",)),
    ((*PLAN, "--profile", "nope"), ("nope",)),
    (("plan", "--model", "gemma3-270m"), ("--gpu",)),
    ((*PLAN_14B, "--scheme", "gptq-w3a16", "--gpu", "rtx4090"), ("known schemes",)),
    ((*PLAN_14B, "--kv-cache-dtype", "int4", "--gpu", "rtx4090"), ("--kv-cache-dtype",)),
    (PLAN_14B, ("--gpu NAME",)),
    ((*PLAN_14B, "--gpu", "rtx4090", "--cpu"), ("--gpu NAME",)),
    ((*PLAN_14B, "--cpu"), ("--kv-cache-gib",)),
]  # fmt: skip
DOCTOR: list[Case] = [
    (("doctor", "missing.log"), ("missing.log",)),
    (("doctor",), ("give a LOGFILE", "--metrics")),
    (("doctor", "--metrics", "http://127.0.0.1:9"), ("127.0.0.1:9/metrics", "no answer")),
    (("doctor", "--metrics", "ftp://127.0.0.1/"), ("ftp://", "http")),
    *[(("doctor", f"{{d}}/{name}"), (name,)) for name in ("a-folder.csv", "missing.log", "dangling.csv")],
    (("doctor", "{d}/binary.log", "--profile", "rtx9090"), ("rtx9090",)),
    (("doctor", "x.log", "--metrics", "http://127.0.0.1:1"), ("give a LOGFILE",)),
]  # fmt: skip
LOAD: list[Case] = [
    (("load", "--model", "{tiny}", "--concurrency", "0,x"), ("--concurrency", "0,x")),
    (("load", "--model", "{tiny}", "--seconds-per-level", "-1"), ("--seconds-per-level", "-1")),
    (("load", "--url", "not a url"), ("not a url",)),
    (("load", "--model", "{tiny}", "--prompt-tokens", "0"), ("--prompt-tokens",)),
    (("load", "--model", "{tiny}", "--max-tokens", "0"), ("--max-tokens",)),
    (("load", "--model", "{tiny}", "--checkpoint-dir", "{d}/a-folder.csv"), ("a-folder.csv",)),
    (("load", "--model", "{tiny}", "--profile", "nope"), ("nope",)),
    (("load", "--concurrency", "1,x"), ("--concurrency '1,x'",)),
    (("load", "--seconds-per-level", "0"), ("--seconds-per-level",)),
    (("load", "--url", "http://127.0.0.1:9", "--ab", "prefix-caching"),
     ("--ab serves the checkpoint twice",)),
    (("load", "--url", "http://192.168.1.20:8000"), ("only target this machine",)),
]  # fmt: skip
CHOOSE: list[Case] = [
    (("choose", "--leaderboard", "{d}/models/leaderboard.csv", "--gpu", "rtx4090"), ("leaderboard.csv",)),
    (("choose", "--leaderboard", "missing.csv", "--gpu", "rtx4090"), ("missing.csv", "make eval")),
    *[(("choose", "--leaderboard", at(name), "--gpu", "rtx4090"), naming(name)) for name in BOARD_INPUTS],
    (("choose", *GOOD, "--max-loss", "nan"), ("--max-loss",)),
    (("choose", *GOOD, "--max-loss", "-1"), ("--max-loss",)),
    (("choose", *GOOD, "--task", "hellaswag"), ("hellaswag",)),
    (("choose", *GOOD, "--count", "0"), ("--count",)),
    (("choose", *GOOD, "--min-concurrency", "inf"), ("inf",)),
    (("choose", *GOOD, "--model", "nope"), ("nope",)),
]  # fmt: skip
DIFF: list[Case] = [
    (("diff", "missing-a.csv", "missing-b.csv"), ("missing-a.csv",)),
    *[(("diff", at(name), "{d}/good.csv"), naming(name)) for name in BOARD_INPUTS],
]  # fmt: skip
REPORT: list[Case] = [
    (("report",), ("--leaderboard",)),
    *[(("report", "--leaderboard", at(name)), naming(name)) for name in BOARD_INPUTS],
    (("report", "--leaderboard", "{d}/other-model.csv"), ("other-model.csv", "models")),
    (("report", "--leaderboard", "{d}/good.csv"), ("good.csv", "not in a run folder", "--out DIR")),
    (("report", "--leaderboard", "/dev/stdin"), ("/dev/stdin", "not a regular file")),
    (("report", "--leaderboard", "{d}/good.csv", "--out", "{d}/good.csv"), ("--out", "good.csv", "a file")),
    (("report", "--leaderboard", "{d}/good.csv", "--out", "{d}/models"),
     ("--out", "models", "files kqe did not write")),
]  # fmt: skip
COMPARE: list[Case] = [
    (("compare", "missing.jsonl", "missing2.jsonl"), ("missing.jsonl",)),
    (("compare", "{d}/other-format.jsonl", "{d}/other-format.jsonl"), ("other-format.jsonl",)),
    (("compare", "{d}/base.jsonl", "{d}/other-items.jsonl"), ("share no items", "same items")),
    (("compare", "{d}/base.jsonl", "{d}/same-items.jsonl", "--margin", "0"), ("margin 0", "--margin 1.0")),
    (("compare", "{d}/base.jsonl", "{d}/same-items.jsonl", "--margin", "-1"), ("margin -1", "--margin")),
    (("compare", "{d}/base.jsonl", "{d}/csv-rows.jsonl"), ("csv-rows.jsonl:1", "task, item_id and correct")),
    *[(("compare", at(name), "{d}/not-items.jsonl"), naming(name)) for name in ITEM_FILES],
    (("compare", "{d}/not-items.jsonl", "{d}/not-items.jsonl", "--margin", "nan"), ("--margin",)),
    (("compare", "{d}/not-items.jsonl", "{d}/not-items.jsonl", "--margin", "-5"), ("--margin",)),
]  # fmt: skip
RAG_DATA = ("--rag-data", "{repo}/tests/data/ko_rag")
RAG_SCORE: list[Case] = [
    (("rag", "score", "{d}/rag-answers/not-json/answers.jsonl", *RAG_DATA), ("answers.jsonl:1: not JSON",)),
    (("rag", "score", "{d}/rag-answers/no-answer/answers.jsonl", *RAG_DATA),
     ("answers.jsonl:1:", "'answer' must be a string")),
    (("rag", "score", "{d}/rag-answers/not-object/answers.jsonl", *RAG_DATA),
     ("answers.jsonl:1: not a JSON object",)),
    (("rag", "score", "{d}/rag-answers/unknown-id/answers.jsonl", *RAG_DATA),
     ("answers.jsonl:2:", "'q9'", "q1, q2")),
    (("rag", "score", "{d}/rag-answers/repeated-id/answers.jsonl", *RAG_DATA),
     ("'q1' already used on line 1",)),
    (("rag", "score", "{d}/rag-answers/blank/answers.jsonl", *RAG_DATA), ("holds no answers",)),
    (("rag", "score", "nowhere.jsonl", *RAG_DATA), ("nowhere.jsonl not found",)),
    (("rag", "score", "{d}/rag-answers/good/answers.jsonl", "--rag-data", "{d}/no"),
     ("docs.jsonl not found",)),
    *[(("rag", "score", at(name), *RAG_DATA), naming(name)) for name in NOT_READ],
]  # fmt: skip
TASKS: list[Case] = [
    (("tasks", "--include-path", "{d}/models/not-a-model"), ("--include-path", "no *.yaml")),
    (("tasks", "--include-path", "/"), ("--include-path /", "for a folder of task YAMLs")),
    (("tasks", "--include-path", "{d}/deep-tasks"), ("deep-tasks", "too deep", "more than 8 deep")),
]
MODELS: list[Case] = [
    (("models", "extra-arg"), ("extra-arg",)),
]
TOP_LEVEL: list[Case] = [
    (("evl",), ("evl", "eval")),
]
TABLES = {
    "eval": EVAL, "calibrate": CALIBRATE, "quantize": QUANTIZE, "plan": PLAN_CASES, "doctor": DOCTOR,
    "load": LOAD, "choose": CHOOSE, "diff": DIFF, "report": REPORT, "compare": COMPARE, "rag": RAG_SCORE,
    "tasks": TASKS, "models": MODELS, "kqe": TOP_LEVEL,
}  # fmt: skip
"""Every command's table, by the command it runs."""

CASES = [(args, needles) for table in TABLES.values() for args, needles in table]


def fill(args: tuple[str, ...], cases_dir: Path, tiny: Path) -> list[str]:
    """The case's command line with `{d}`, `{tiny}` and `{repo}` filled in."""
    places = {"{d}": str(cases_dir), "{tiny}": str(tiny), "{repo}": str(REPO)}
    filled = []
    for arg in args:
        for mark, value in places.items():
            arg = arg.replace(mark, value)
        filled.append(arg)
    return filled


@pytest.mark.parametrize(("args", "needles"), CASES, ids=[" ".join(args) for args, _ in CASES])
def test_bad_input_is_one_line_naming_it(
    args: tuple[str, ...],
    needles: tuple[str, ...],
    cases_dir: Path,
    tiny_model_dir: Path,
    home_with_sources: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = invoke_kqe(monkeypatch, home_with_sources, cases_dir, fill(args, cases_dir, tiny_model_dir))
    assert "No such option" not in result.stderr, "a case naming a removed option tests nothing"
    assert_one_line_error(result, *needles)


FIRST_CASES = [table[0] for table in TABLES.values()]


@pytest.mark.parametrize(("args", "needles"), FIRST_CASES, ids=list(TABLES))
def test_the_real_entry_point_says_the_same(
    args: tuple[str, ...],
    needles: tuple[str, ...],
    cases_dir: Path,
    tiny_model_dir: Path,
    home_with_sources: Path,
) -> None:
    """The first case of each command's table, through `python -m kqe.cli` in a subprocess."""
    result = run_kqe(*fill(args, cases_dir, tiny_model_dir), cwd=cases_dir, home=home_with_sources)
    assert_one_line_error(result, *needles)


def test_every_table_runs_its_own_command() -> None:
    """A case filed under another command's table would hide that this one lacks cases."""
    for command, table in TABLES.items():
        assert table and all(args[0] == command for args, _ in table if command != "kqe"), command
