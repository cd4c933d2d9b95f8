"""Errors through the real `kqe` entry point that take more than a command line: exit code 2, one line
naming the problem, no traceback (`test_bad_input.py` holds the per-command tables)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kqe.core.workspace import Workspace
from tests.helpers.cli import assert_one_line_error, run_kqe
from tests.helpers.repo import REPO
from tests.helpers.sources import write_sources


def test_an_unreachable_ray_head_is_one_line_before_any_work(tiny_model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed: KQE_EXTRAS=ray make setup")
    args = ("eval", "--model", str(tiny_model_dir), "--executor", "ray", "--ray-address", "127.0.0.1:9")
    result = run_kqe(*args, cwd=tmp_path, home=tmp_path / "home")
    assert_one_line_error(result, "--ray-address 127.0.0.1:9: nothing answers there", "ray start --head")
    assert not (tmp_path / "calibration_data").exists() and not (tmp_path / "results").exists()


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
        ["make", "--no-print-directory", "-n", target],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if line.strip()]
    assert commands[0] == "bash scripts/setup.sh" and then in commands[1], commands


def test_installed_model_missing_says_run_setup(tmp_path: Path) -> None:
    result = run_kqe("eval", "--model", "gemma3-270m", cwd=tmp_path, home=tmp_path / "empty-home")
    assert_one_line_error(result, "gemma3-270m", "make setup")


def test_missing_serve_environment_is_found_before_any_build(tiny_model_dir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_sources(Workspace(root=home, cache=home, serve_venv=tmp_path / "none"))
    result = run_kqe(
        "eval",
        "--model",
        str(tiny_model_dir),
        "--schemes",
        "bf16,awq-w4a16",
        cwd=tmp_path,
        home=home,
        serve_venv=tmp_path / "no-serve-venv",
    )
    assert_one_line_error(result, "no-serve-venv", "make setup")
    assert not (home / "checkpoints").exists() and not (tmp_path / "calibration_data").exists()
