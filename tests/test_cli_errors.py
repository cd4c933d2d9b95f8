"""Bad input through the real `kqe` entry point: exit code 2, one line naming the problem, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_kqe(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KQE_HOME": str(home), "COLUMNS": "200"}
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
        (("eval", "--model", "{tiny}", "--profile", "rtx9090"), ("rtx9090", "cpu-small")),
        (("compare", "missing.jsonl", "missing2.jsonl"), ("missing.jsonl",)),
    ],
)
def test_bad_input_is_one_line(
    args: tuple[str, ...], needles: tuple[str, ...], tiny_model_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "not-a-model").mkdir()
    args = tuple(str(tiny_model_dir) if a == "{tiny}" else a for a in args)
    result = run_kqe(*args, cwd=tmp_path, home=tmp_path / "home")
    assert_one_line_error(result, *needles)


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


def test_make_eval_before_setup_says_run_setup(tmp_path: Path) -> None:
    result = subprocess.run(
        ["make", "-s", "eval", f"KQE={tmp_path / 'missing' / 'kqe'}"], cwd=REPO, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "run `make setup` first" in result.stderr
    assert "Traceback" not in result.stderr


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
