"""The repository root, for the paths the tests take from the checkout."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
