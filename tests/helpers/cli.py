"""Running `kqe` as a user does (the real entry point in a subprocess, or the click group in process),
and the one assertion every bad-input test makes of the result."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from kqe.cli import main
from tests.helpers.repo import REPO


def run_kqe(
    *args: str, cwd: Path, home: Path, serve_venv: Path = REPO / ".venv-serve"
) -> subprocess.CompletedProcess:
    """`python -m kqe.cli ARGS` in `cwd` with `home` as KQE_HOME: the entry point a user runs (of this
    checkout: a worktree's venv may be linked to another checkout's editable install)."""
    env = {**os.environ, "KQE_HOME": str(home), "KQE_SERVE_VENV": str(serve_venv), "COLUMNS": "200"}
    env["PYTHONPATH"] = str(REPO)  # this checkout's kqe, not the one the venv was installed from
    return subprocess.run(
        [sys.executable, "-m", "kqe.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def invoke_kqe(monkeypatch: pytest.MonkeyPatch, home: Path, cwd: Path, args: list[str]) -> Result:
    """`kqe ARGS` in this process (click's runner), with `home` as KQE_HOME and `cwd` as the folder."""
    monkeypatch.setenv("KQE_HOME", str(home))
    monkeypatch.setenv("KQE_SERVE_VENV", str(REPO / ".venv-serve"))
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, args)


def assert_one_line_error(result: subprocess.CompletedProcess | Result, *needles: str) -> str:
    """The run exited 2 with one line on stderr, `kqe: error: …` holding every needle, nothing on
    stdout and no traceback anywhere; returns that line."""
    if isinstance(result, Result):
        code, stdout, stderr = result.exit_code, result.stdout, result.stderr
        context: object = (result.output, result.exception)
    else:
        code, stdout, stderr = result.returncode, result.stdout, result.stderr
        context = stderr
    assert code == 2, (code, context)
    assert "Traceback" not in stderr + stdout, context
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kqe: error:"), context
    assert not stdout.strip(), context
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def invoke_command(command: click.Command, *args: str) -> Result:
    """One `kqe` subcommand run in this process with `args`."""
    return CliRunner().invoke(command, list(args))
