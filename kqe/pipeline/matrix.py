"""Which checkpoints one `make eval` builds: schemes × calibration mixes, and the calibration controls.

A scheme that needs calibration data gets one checkpoint per mix, named `<scheme>-<mix>`
(`awq-w4a16-ko70`, `awq-w4a16-en100`); a scheme without one keeps its name (`bf16`, `fp8-dynamic`).
Where a scheme is built with several mixes, each is paired with the mix holding the least Korean
(English-only when asked): that pair, on the same items, is the calibration effect.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from kqe.core.errors import UserError
from kqe.core.kv_cache import AUTO, kv_row_name
from kqe.core.schemes import BASE_SCHEME
from quantize.calibration import LANGS, NAMED_MIXES, parse_mix


@dataclass(frozen=True)
class MatrixEntry:
    """One checkpoint of the run."""

    name: str
    """Checkpoint name in the leaderboard."""
    scheme: str
    """Scheme it is built with."""
    mix: str | None
    """Calibration mix label (`ko70`, `ko60en40`), or None for a scheme without calibration."""
    kv_cache_dtype: str = AUTO
    """`--kv-cache-dtype` it is served with (`kqe/core/kv_cache.py`); the run's profile otherwise."""
    weights: str | None = None
    """The entry whose checkpoint it serves (`bf16` for `bf16+kv-fp8`); None: its own build."""

    @property
    def built_as(self) -> str:
        """The entry whose checkpoint this one is: itself, or the one whose weights it serves."""
        return self.weights or self.name


def mix_label(mix: str) -> str:
    """Short name of a mix for checkpoint names, one per set of shares however it is written: `ko70`
    as is, `ko=0.7,en=0.3` → `ko70` too, `en=0.4,ko=0.6` → `ko60en40`."""
    if mix in NAMED_MIXES:
        return mix
    shares = {lang: share for lang, share in parse_mix(mix).items() if share > 0}
    for name, named in NAMED_MIXES.items():
        if named.keys() == shares.keys() and all(abs(named[lang] - shares[lang]) < 1e-9 for lang in shares):
            return name
    return "".join(f"{lang}{round(100 * shares[lang])}" for lang in LANGS if lang in shares)


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

    `korean_share` maps mix labels to their asked Korean share. The reference itself, schemes built
    with one mix only and KV rows (paired with their weights at auto instead) have no entry.
    """
    by_scheme: dict[str, list[MatrixEntry]] = {}
    for entry in entries:
        if entry.mix is not None and entry.weights is None:
            by_scheme.setdefault(entry.scheme, []).append(entry)
    references: dict[str, str] = {}
    for group in by_scheme.values():
        if len(group) < 2:
            continue
        reference = min(group, key=lambda e: korean_share[e.mix or ""])
        references |= {e.name: reference.name for e in group if e is not reference}
    return references


def default_kv_checkpoints(entries: Sequence[MatrixEntry], bits: Callable[[str], int | None]) -> list[str]:
    """What `--kv-checkpoints` defaults to: the base and the run's first 4-bit checkpoint (in the
    matrix's order: the most Korean-calibrated AWQ of the default run). Which 4-bit checkpoint scores
    best is known only after scoring; name it with `--kv-checkpoints` in a second run."""
    four_bit = next((e.name for e in entries if e.name != BASE_SCHEME and bits(e.scheme) == 4), None)
    return [BASE_SCHEME, *([four_bit] if four_bit else [])]


def kv_variants(
    entries: Sequence[MatrixEntry], kv_dtypes: Sequence[str], chosen: Sequence[str]
) -> list[MatrixEntry]:
    """One entry per chosen checkpoint and non-auto KV dtype, each serving that checkpoint's weights
    (`bf16+kv-fp8`); a chosen name the run does not build is an error naming the ones it does."""
    by_name = {entry.name: entry for entry in entries}
    unknown = [name for name in chosen if name not in by_name]
    if unknown:
        raise UserError(
            f"--kv-checkpoints {','.join(chosen)!r}: {unknown[0]!r} is not a checkpoint of this run: use "
            f"some of {', '.join(by_name)}"
        )
    return [
        replace(by_name[name], name=kv_row_name(name, kv), kv_cache_dtype=kv, weights=name)
        for name in chosen
        for kv in kv_dtypes
        if kv != AUTO
    ]


def kv_references(entries: Sequence[MatrixEntry]) -> dict[str, str]:
    """KV variant → the same weights served at `auto`: the pairing that is the KV cache's cost alone."""
    return {entry.name: entry.weights for entry in entries if entry.weights is not None}
