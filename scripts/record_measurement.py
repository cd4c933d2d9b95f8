"""Append one hand-measured number to results/measurements.jsonl, with this machine's date, CPU, flags,
load and commit (bench/machine.py), or merge fragment files of rows into it. Then `make docs`.

    .venv/bin/python scripts/record_measurement.py --topic first-run \\
        --what '`make eval` default matrix, first run on a fresh clone, setup excluded' \\
        --value 48.2 --unit min [--low L --high H --spread min-max] [--runs N] [--load 1.8] \\
        [--note '...'] [--source results/...]
    .venv/bin/python scripts/record_measurement.py --merge .fragments/*.measurements.jsonl

Bad input: one line on stderr naming the option, exit 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the repository's packages

from pydantic import ValidationError

from bench.measurements import MEASUREMENTS, TOPICS, Measurement, append, merge, this_machine
from kqe.core.errors import UserError

REPO = Path(__file__).resolve().parents[1]
NEEDED = ("topic", "what", "value", "unit")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, no usage block: the option and what is wrong with it."""
        self.exit(2, f"{self.prog}: {message}\n")


def number(text: str) -> int | float:
    """An int when written as one (the file keeps 3, not 3.0); finite only."""
    value: int | float
    try:
        value = int(text)
    except ValueError:
        value = float(text)  # argparse names the option when this fails
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def parser() -> _Parser:
    cli = _Parser(prog="record_measurement.py", description=__doc__.split("\n\n")[0])
    cli.add_argument("--topic", help=f"one of {', '.join(TOPICS)}")
    cli.add_argument("--what", help="what was measured, self-contained (command, model, items, exclusions)")
    cli.add_argument("--value", type=number, help="the number (the median of several runs)")
    cli.add_argument("--unit", help='"s", "min", "items/s", "GiB", "MiB", "%%", "x", "fraction" ...')
    cli.add_argument("--low", type=number, help="lower end of the spread (with --high and --spread)")
    cli.add_argument("--high", type=number, help="upper end of the spread")
    cli.add_argument("--spread", choices=("min-max", "95% CI", "range"), help="what --low..--high is")
    cli.add_argument("--runs", type=count, help="how many runs --value summarises")
    cli.add_argument("--load", help="the load average while it ran (default: the 1-minute one now)")
    cli.add_argument("--note", default="", help="conditions, caveats, comparisons")
    cli.add_argument("--source", help="a results/ path holding the raw data")
    cli.add_argument("--merge", nargs="+", type=Path, metavar="FILE", help="append the rows of these files")
    cli.add_argument("--file", type=Path, default=REPO / MEASUREMENTS, help="the measurements file")
    return cli


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    try:
        if args.merge:
            given = [f"--{name}" for name in NEEDED if getattr(args, name) is not None]
            if given:
                cli.error(f"--merge: takes rows from files, not {', '.join(given)}")
            added = merge(args.file, args.merge)
            sys.stderr.write(f"{args.file}: {len(added)} rows added\n")
            return 0
        missing = [f"--{name}" for name in NEEDED if getattr(args, name) is None]
        if missing:
            cli.error(f"{missing[0]}: required (or --merge FILE...)")
        row = build(cli, args)
        append(args.file, [row])
    except UserError as err:  # a bad file: one line per bad row
        cli.exit(2, f"{err}\n")
    sys.stderr.write(f"{args.file}: row added ({row.topic}: {row.value} {row.unit})\n")
    return 0


def build(cli: _Parser, args: argparse.Namespace) -> Measurement:
    """The row, this machine's facts filled in; a bad field is reported as its option."""
    machine = this_machine().model_dump()
    if args.load is not None:
        machine["load"] = args.load
    given = {name: getattr(args, name) for name in ("topic", "what", "value", "unit", "low", "high")}
    given |= {"spread": args.spread, "runs": args.runs, "note": args.note, "source": args.source}
    try:
        return Measurement(**given, **machine)
    except ValidationError as err:
        first = err.errors()[0]
        option = f"--{first['loc'][0]}" if first["loc"] else "--low/--high/--spread"
        cli.error(f"{option}: {first['msg'].removeprefix('Value error, ')}")


if __name__ == "__main__":
    raise SystemExit(main())
