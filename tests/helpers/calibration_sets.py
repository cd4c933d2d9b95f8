"""Calibration sets built with the tiny model's tokenizer, and their lines read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kqe.core.modelstore import LocalModel
from kqe.core.records import CalibrationSet
from kqe.core.workspace import Workspace
from quantize.calibration import build_calibration_set, parse_mix
from quantize.catalog import SourceSpec

SEQ_LEN = 64


def build(
    ws: Workspace, tok: Path, sources: list[SourceSpec], mix: str = "ko70", **kw: Any
) -> CalibrationSet:
    args = {"samples": 10, "seq_len": SEQ_LEN, "seed": 7} | kw
    samples, seq_len, seed = args.pop("samples"), args.pop("seq_len"), args.pop("seed")
    return build_calibration_set(
        ws, LocalModel("tiny", tok), parse_mix(mix), samples, seq_len, seed, mix, sources, **args
    )


def sample_lines(record: CalibrationSet) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(record.path).read_text(encoding="utf-8").splitlines()]
