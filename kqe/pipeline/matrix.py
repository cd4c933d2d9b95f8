"""Which checkpoints one `make eval` builds: schemes × calibration mixes, and the calibration controls.

A scheme that needs calibration data gets one checkpoint per mix, named `<scheme>-<mix>`
(`awq-w4a16-ko70`, `awq-w4a16-en100`); a scheme without one keeps its name (`bf16`, `fp8-dynamic`).
Where a scheme is built with several mixes, each is paired with the mix holding the least Korean
(English-only when asked): that pair, on the same items, is the calibration effect.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kqe.core.errors import UserError
from kqe.core.schemes import BASE_SCHEME
from quantize.calibration import NAMED_MIXES, parse_mix


@dataclass(frozen=True)
class MatrixEntry:
    """One checkpoint of the run."""

    name: str
    """Checkpoint name in the leaderboard."""
    scheme: str
    """Scheme it is built with."""
    mix: str | None
    """Calibration mix label (`ko70`, `ko60en40`), or None for a scheme without calibration."""


def mix_label(mix: str) -> str:
    """Short name of a mix for checkpoint names: `ko70` as is, `ko=0.6,en=0.4` → `ko60en40`."""
    if mix in NAMED_MIXES:
        return mix
    shares = parse_mix(mix)
    return "".join(f"{lang}{round(100 * share)}" for lang, share in shares.items() if share > 0)


def plan_matrix(
    schemes: Sequence[str], mixes: Sequence[str], needs_calibration: Callable[[str], bool]
) -> list[MatrixEntry]:
    """The checkpoints of a run, base first, in the order asked; duplicates are an error."""
    labels = [mix_label(mix) for mix in mixes]
    if len(set(labels)) != len(labels):
        raise UserError(f"calibration {','.join(mixes)!r} names the same mix twice: list each once")
    entries = [MatrixEntry(BASE_SCHEME, BASE_SCHEME, None)]
    for scheme in (s for s in schemes if s != BASE_SCHEME):
        if needs_calibration(scheme):
            entries += [MatrixEntry(f"{scheme}-{label}", scheme, label) for label in labels]
        else:
            entries.append(MatrixEntry(scheme, scheme, None))
    names = [entry.name for entry in entries]
    if len(set(names)) != len(names):
        raise UserError(f"schemes {','.join(schemes)!r} list a checkpoint twice: list each scheme once")
    return entries


def calibration_references(entries: Sequence[MatrixEntry], korean_share: dict[str, float]) -> dict[str, str]:
    """Checkpoint → the checkpoint of the same scheme calibrated with the least Korean.

    `korean_share` maps mix labels to their asked Korean share. The reference itself, and schemes
    built with one mix only, have no entry.
    """
    by_scheme: dict[str, list[MatrixEntry]] = {}
    for entry in entries:
        if entry.mix is not None:
            by_scheme.setdefault(entry.scheme, []).append(entry)
    references: dict[str, str] = {}
    for group in by_scheme.values():
        if len(group) < 2:
            continue
        reference = min(group, key=lambda e: korean_share[e.mix or ""])
        references |= {e.name: reference.name for e in group if e is not reference}
    return references
