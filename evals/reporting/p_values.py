"""How every report prints a p-value: three significant digits down to a display floor, below it
`< 0.001`; a p that small says only that it is small (the clusters behind it bound how small it can
honestly be, `evals/statistics/cluster_tests.py`)."""

from __future__ import annotations

P_DISPLAY_FLOOR = 0.001
"""Below this a p prints as `< 0.001`."""


def format_p(p: float | None, label: str = "") -> str:
    """`0.0312`, `< 0.001`, `—` for None; with `label` (`p`): `p = 0.0312`, `p < 0.001`."""
    if p is None:
        return f"{label} —".strip()
    if p < P_DISPLAY_FLOOR:
        return f"{label} < {P_DISPLAY_FLOOR:g}".strip()
    return f"{label} = {p:.3g}" if label else f"{p:.3g}"
