"""Where `kqe report` may write: a folder kqe owns, never beside just any file it is given.

A leaderboard's report goes into its own folder only when that is a run folder (kqe's `run.json`
beside the leaderboard), or into the `--out` folder the user names: a new or empty folder, or one
kqe wrote a run or a report into before. In either, a `report.md` is replaced only when kqe wrote
it (the `.report-files.json` an earlier report left beside it says so): `/dev/stdin` gives no
`/dev/report.md`, and a leaderboard kept in a folder of the user's never costs them its `report.md`.
"""

from __future__ import annotations

from pathlib import Path

from evals.reporting.report import REPORT_FILES
from kqe.core.errors import UserError
from kqe.core.results import RunSummary

REPORT = "report.md"
RUN_RECORD = "run.json"


def report_folder(board: Path, out: Path | None, run: RunSummary | None) -> Path:
    """The folder the report of `board` goes into: `out` when given, else the leaderboard's folder,
    which must be a run folder (`run` is the summary read beside it, None when there is none)."""
    if out is not None:
        return _given_folder(out)
    folder = board.parent
    if run is None:
        raise UserError(
            f"{board} is not in a run folder of kqe (no {RUN_RECORD} beside it), so kqe writes no "
            f"report there: pass --out DIR, a new or empty folder, for its report"
        )
    _refuse_foreign_report(folder)
    return folder


def _given_folder(out: Path) -> Path:
    """`out`, when kqe may write its report there: absent, empty, or a folder of kqe's."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file: give a folder (new or empty) for the report")
    if out.is_dir():
        ours = (out / REPORT_FILES).is_file() or (out / RUN_RECORD).is_file()
        if not ours and any(out.iterdir()):
            raise UserError(
                f"--out {out} holds files kqe did not write: give a new or empty folder for the report"
            )
        _refuse_foreign_report(out)
    return out


def _refuse_foreign_report(folder: Path) -> None:
    """A `report.md` in `folder` that no earlier report of kqe's recorded is the user's: kept."""
    report = folder / REPORT
    if (report.exists() or report.is_symlink()) and not (folder / REPORT_FILES).is_file():
        raise UserError(
            f"{report} was not written by kqe (no {REPORT_FILES} beside it): move it, or pass "
            "--out DIR, a new or empty folder, for the report"
        )
