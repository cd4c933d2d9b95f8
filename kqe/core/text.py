"""Text from outside (file contents, names, paths, error messages) made safe for where it is shown."""

from __future__ import annotations

import html
import json
import math
import re
from typing import Any

_TERMINAL_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)
"""ANSI CSI and OSC sequences, and every C0/C1 control character but tab and newline."""


def printable(text: str) -> str:
    """`text` without terminal control sequences: what a log or a name holds cannot move the cursor,
    recolour the terminal or set its title."""
    return _TERMINAL_CONTROL.sub("", text)


def json_text(value: Any) -> str:
    """`value` as JSON that every parser reads: a non-finite number (NaN, ±inf) becomes null."""
    return json.dumps(_finite(value), indent=2, ensure_ascii=False, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def markdown_cell(text: str) -> str:
    """`text` as one Markdown table cell: HTML escaped, `|` escaped, line breaks as spaces."""
    flat = " ".join(printable(text).split("\n"))
    return html.escape(flat, quote=False).replace("|", "\\|")
