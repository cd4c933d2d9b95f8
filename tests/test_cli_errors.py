"""Bad input through the real `kqe` entry point: exit code 2, one line naming the problem, no traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kqe.core.workspace import Workspace
from tests.test_pipeline import write_sources

REPO = Path(__file__).resolve().parents[1]


def run_kqe(
    *args: str, cwd: Path, home: Path, serve_venv: Path = REPO / ".venv-serve"
) -> subprocess.CompletedProcess:
    env = {**os.environ, "KQE_HOME": str(home), "KQE_SERVE_VENV": str(serve_venv), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "kqe.cli", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("eval", "--model", "qwen9-1b"), ("qwen9-1b", "gemma3-270m", "hf:")),
        (("eval", "--model", "./not-a-model"), ("not-a-model",)),
        (("eval", "--model", "{tiny}", "--schemes", "bf16,awq-w3"), ("awq-w3", "awq-w4a16")),
        (("eval", "--model", "{tiny}", "--calibration", "ko=0.9,en=0.3"), ("ko=0.9,en=0.3", "1")),
        (("eval", "--model", "{tiny}", "--tasks", "kmmlu,hellaswag"), ("hellaswag", "mmlu")),
        (("eval", "--model", "{tiny}", "--tasks", "kmmlu_redux"), ("LGAI-EXAONE/KMMLU-Redux", "unconfirmed")),
        (
            ("eval", "--model", "{tiny}", "--tasks", "mmmlu_ko,mmlu_en"),
            ("openai/MMMLU is not available offline", "datasets/openai/MMMLU", "KQE_ONLINE=1"),
        ),
        (("eval", "--model", "{tiny}", "--profile", "rtx9090"), ("rtx9090", "cpu-small")),
        (("compare", "missing.jsonl", "missing2.jsonl"), ("missing.jsonl",)),
        (
            ("eval", "--model", "{tiny}", "--ray-address", "10.0.0.1:6379"),
            ("10.0.0.1:6379", "--executor ray"),
        ),
    ],
)
def test_bad_input_is_one_line(
    args: tuple[str, ...], needles: tuple[str, ...], tiny_model_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "not-a-model").mkdir()
    args = tuple(str(tiny_model_dir) if a == "{tiny}" else a for a in args)
    result = run_kqe(*args, cwd=tmp_path, home=tmp_path / "home")
    assert_one_line_error(result, *needles)


def test_an_unreachable_ray_head_is_one_line_before_any_work(tiny_model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed: KQE_EXTRAS=ray make setup")
    args = ("eval", "--model", str(tiny_model_dir), "--executor", "ray", "--ray-address", "127.0.0.1:9")
    result = run_kqe(*args, cwd=tmp_path, home=tmp_path / "home")
    assert_one_line_error(result, "--ray-address 127.0.0.1:9: nothing answers there", "ray start --head")
    assert not (tmp_path / "calibration_data").exists() and not (tmp_path / "results").exists()


def test_compare_rejects_a_file_of_another_format(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hello": 1}\n{"hello": 2}\n')
    result = run_kqe("compare", str(bad), str(bad), cwd=tmp_path, home=tmp_path / "home")
    assert_one_line_error(result, "bad.jsonl")


def test_help_explains_every_command(tmp_path: Path) -> None:
    top = run_kqe("--help", cwd=tmp_path, home=tmp_path)
    assert top.returncode == 0 and "leaderboard" in top.stdout
    for command in ("eval", "models", "compare", "plan", "doctor", "load", "choose", "diff", "report"):
        result = run_kqe(command, "--help", cwd=tmp_path, home=tmp_path)
        assert result.returncode == 0 and "Usage:" in result.stdout


@pytest.mark.parametrize(("target", "then"), [("eval", ".venv/bin/kqe eval"), ("test", "-m pytest")])
def test_make_eval_and_make_test_set_up_first(target: str, then: str) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    }  # under make test
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", target], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if line.strip()]
    assert commands[0] == "bash scripts/setup.sh" and then in commands[1], commands


def test_installed_model_missing_says_run_setup(tmp_path: Path) -> None:
    result = run_kqe("eval", "--model", "gemma3-270m", cwd=tmp_path, home=tmp_path / "empty-home")
    assert_one_line_error(result, "gemma3-270m", "make setup")


@pytest.mark.parametrize(
    ("cand_rows", "options", "needles"),
    [
        ('{"task": "mmlu", "item_id": "other", "correct": true}\n', (), ("share no items", "same items")),
        (
            '{"task": "mmlu", "item_id": "q1", "correct": true}\n',
            ("--margin", "0"),
            ("margin 0", "--margin 1.0"),
        ),
        (
            '{"task": "mmlu", "item_id": "q1", "correct": true}\n',
            ("--margin", "-1"),
            ("margin -1", "--margin"),
        ),
        ("task,item_id,correct\nmmlu,q1,true\n", (), ("cand.jsonl:1", "task, item_id and correct")),
    ],
)
def test_compare_bad_input_is_one_line(
    cand_rows: str, options: tuple[str, ...], needles: tuple[str, ...], tmp_path: Path
) -> None:
    base = tmp_path / "base.jsonl"
    base.write_text('{"task": "mmlu", "item_id": "q1", "correct": false}\n')
    (tmp_path / "cand.jsonl").write_text(cand_rows)
    result = run_kqe("compare", "base.jsonl", "cand.jsonl", *options, cwd=tmp_path, home=tmp_path / "home")
    assert_one_line_error(result, *needles)


@pytest.fixture(scope="module")
def bad_models(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Model folders that must be refused: pickled weights only, and code shipped with the model."""
    root = tmp_path_factory.mktemp("bad-models")
    (root / "pickled").mkdir()
    shutil.copy(tiny_model_dir / "config.json", root / "pickled" / "config.json")
    (root / "pickled" / "pytorch_model.bin").write_bytes(b"not loaded: unpickling runs code")
    shutil.copytree(tiny_model_dir, root / "custom-code")
    config = json.loads((root / "custom-code" / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (root / "custom-code" / "config.json").write_text(json.dumps(config))
    (root / "leaderboard.csv").write_text("a,b\n1,2\n")
    return root


# Across the commands: each input is wrong in one way the user can fix; {tiny} is the tiny model,
# {bad} the folder of bad_models, {home} a KQE_HOME with sources (for eval, past its task data).
BAD_INPUTS = [
    (("eval", "--model", "{tiny}", "--limit", "-1"), ("limit -1",)),
    (("eval", "--model", "{tiny}", "--concurrency", "0"), ("--concurrency", "0")),
    (("eval", "--model", "{tiny}", "--seed", "abc"), ("--seed", "abc")),
    (("eval", "--model", "{tiny}", "--load", "--load-duration-s", "-3"), ("--load-duration-s",)),
    (("eval", "--model", "{tiny}", "--schemes", "awq-w4a16", "--calib-samples", "0"), ("--calib-samples",)),
    (("eval", "--model", "{tiny}", "--calibration", "ko=abc"), ("ko=abc", "ko70")),
    (("eval", "--model", "{bad}/pickled"), ("pickled", "safetensors")),
    (("eval", "--model", "{bad}/custom-code"), ("custom-code", "auto_map", "--trust-remote-code")),
    (("eval", "--model", "hf:../../etc"), ("hf:../../etc", "hf:org/name")),
    (("eval", "--model", "hf:just-a-name"), ("hf:just-a-name", "hf:org/name")),
    (("eval", "--model", "{tiny}", "--run", "../elsewhere"), ("../elsewhere", "folder name")),
    (
        ("eval", "--model", "{tiny}", "--rag-conditions", "retrieved,orcale"),
        ("--rag-conditions", "orcale", "retrieved,oracle,depth,closed_book"),
    ),
    (("eval", "--model", "{tiny}", "--rag-conditions", ","), ("--rag-conditions", "names no condition")),
    (("evl",), ("evl", "eval")),
    (("plan", "--model", "gemma3-270m", "--gpu", "rtx9999"), ("rtx9999", "rtx4090")),
    (
        ("plan", "--model", "gemma3-270m", "--gpu", "rtx4090", "--count", "3"),
        ("tensor-parallel-size 3", "1, 2"),
    ),
    (("plan", "--model", "gemma3-270m", "--gpu", "rtx4090", "--gpu-memory-utilization", "1.5"), ("1.5",)),
    (("plan", "--model", "gemma3-270m", "--gpu", "rtx4090", "--scheme", "awq-w9"), ("awq-w9", "awq-w4a16")),
    (("plan", "--check-logs", "{bad}"), ("--check-logs", "no *.toml log corpus")),
    (("choose", "--leaderboard", "{bad}/leaderboard.csv", "--gpu", "rtx4090"), ("leaderboard.csv",)),
    (("choose", "--leaderboard", "missing.csv", "--gpu", "rtx4090"), ("missing.csv", "make eval")),
    (("report",), ("--leaderboard",)),
    (("diff", "missing-a.csv", "missing-b.csv"), ("missing-a.csv",)),
    (("doctor", "missing.log"), ("missing.log",)),
    (("doctor",), ("LOGFILE", "--metrics")),
    (("doctor", "--metrics", "http://127.0.0.1:9"), ("127.0.0.1:9/metrics", "no answer")),
    (("doctor", "--metrics", "ftp://127.0.0.1/"), ("ftp://", "http")),
    (("load", "--model", "{tiny}", "--concurrency", "0,x"), ("--concurrency", "0,x")),
    (("load", "--model", "{tiny}", "--seconds-per-level", "-1"), ("--seconds-per-level", "-1")),
    (("calibrate", "--model", "{tiny}", "--mix", "ko=2"), ("ko=2", "1")),
    (("calibrate", "--model", "{tiny}", "--tasks", "kmmlu,ko_rag"), ("--tasks ko_rag", "kmmlu")),
    (
        ("quantize", "--model", "{tiny}", "--scheme", "awq-w4a16", "--tasks", "lm-eval:kobest_copa"),
        ("--tasks lm-eval:kobest_copa", "leave"),
    ),
    (("quantize", "--model", "{tiny}", "--scheme", "nope"), ("nope", "fp8-dynamic")),
]


@pytest.mark.parametrize(("args", "needles"), BAD_INPUTS, ids=[" ".join(a[:3]) for a, _ in BAD_INPUTS])
def test_bad_input_across_the_cli_is_one_line(
    args: tuple[str, ...],
    needles: tuple[str, ...],
    tiny_model_dir: Path,
    bad_models: Path,
    home_with_sources: Path,
    tmp_path: Path,
) -> None:
    places = {"{tiny}": str(tiny_model_dir), "{bad}": str(bad_models)}
    filled = []
    for arg in args:
        for mark, value in places.items():
            arg = arg.replace(mark, value)
        filled.append(arg)
    result = run_kqe(*filled, cwd=tmp_path, home=home_with_sources)
    assert "No such option" not in result.stderr, "a case naming a removed option tests nothing"
    assert_one_line_error(result, *needles)


def test_missing_serve_environment_is_found_before_any_build(tiny_model_dir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_sources(Workspace(root=home, cache=home, serve_venv=tmp_path / "none"))
    result = run_kqe(
        "eval", "--model", str(tiny_model_dir), "--schemes", "bf16,awq-w4a16", cwd=tmp_path, home=home,
        serve_venv=tmp_path / "no-serve-venv",
    )  # fmt: skip
    assert_one_line_error(result, "no-serve-venv", "make setup")
    assert not (home / "checkpoints").exists() and not (tmp_path / "calibration_data").exists()
