"""The text sources of calibration sets and perplexity, declared in `calibration_data/sources.toml`.

Offline sources are files under `ws.sources()` (filled by `make setup`, see `kqe.core.sources`), optionally
cut to the lines between a `start` and a `stop` marker; hub sources are Hugging Face datasets at a
pinned revision, read only when named. `holdout = true` reserves a source for perplexity.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from kqe.core.errors import UserError
from kqe.core.io import loads_toml, sha256_of
from kqe.core.records import SourceFile
from kqe.core.workspace import Workspace

SOURCES_TOML = Path(__file__).resolve().parents[1] / "calibration_data" / "sources.toml"
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_REVISION = re.compile(r"[0-9a-f]{40}")


class SourceSpec(BaseModel):
    """One `[[source]]` entry of `calibration_data/sources.toml`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    lang: Literal["ko", "en"]
    origin: str
    glob: str | None = None
    """Files under the sources folder (offline)."""
    start: str | None = None
    """Regex: each file is read from the first line matching it (inclusive)."""
    stop: str | None = None
    """Regex: each file is read up to the first line matching it (exclusive)."""
    hub_id: str | None = None
    """Hugging Face dataset id (online users only)."""
    hub_config: str | None = None
    split: str = "train"
    text_field: str = "text"
    revision: str = ""
    """Pinned dataset commit (40 hex); required to load a hub source."""
    max_chars: int = 400_000
    """Characters read from a hub source."""
    holdout: bool = False
    """Reserved for perplexity: never used for calibration."""
    text_set: str | None = None
    """Held-out sources: the perplexity text set they belong to (default: their language). The sets
    of a parallel pair (`faq_ko` / `faq_en`, `lo_ko` / `lo_en`: `PARALLEL_TEXT_SETS`) hold the same
    documents in two languages, scored whole."""
    sections: str | None = None
    """Held-out sources: regex of the line that starts each document (its first group names it);
    default one document per file. Documents are what the perplexity bootstrap resamples."""

    @field_validator("start", "stop", "sections")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regex ({exc})") from None
        return pattern

    @model_validator(mode="after")
    def _one_location(self) -> SourceSpec:
        if (self.glob is None) == (self.hub_id is None):
            raise ValueError("give exactly one of `glob` (offline file) or `hub_id` (online dataset)")
        if self.holdout and self.glob is None:
            raise ValueError(
                "a held-out source must be offline files (`glob`): perplexity is measured offline"
            )
        return self


def load_catalog(path: Path = SOURCES_TOML) -> list[SourceSpec]:
    """Every source declared in `path`, offline and online, held-out ones included."""
    try:
        entries = loads_toml(path.read_text(encoding="utf-8")).get("source", [])
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"calibration sources {path}: {str(exc).splitlines()[0]}: fix the file") from None
    specs = []
    for number, entry in enumerate(entries, start=1):
        try:
            specs.append(SourceSpec.model_validate(entry))
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "entry"
            name = entry.get("name", f"#{number}")
            message = error["msg"].removeprefix("Value error, ")
            raise UserError(
                f"calibration sources {path}: source {name}: {where}: {message}: fix it"
            ) from None
    return specs


def default_sources(catalog: Sequence[SourceSpec] | None = None) -> list[SourceSpec]:
    """The offline sources that may feed calibration (held-out and hub sources excluded)."""
    specs = load_catalog() if catalog is None else catalog
    return [s for s in specs if s.glob is not None and not s.holdout]


def holdout_sources(catalog: Sequence[SourceSpec] | None = None) -> list[SourceSpec]:
    """The sources reserved for perplexity."""
    specs = load_catalog() if catalog is None else catalog
    return [s for s in specs if s.holdout]


def named_sources(names: Sequence[str], catalog: Sequence[SourceSpec] | None = None) -> list[SourceSpec]:
    """The calibration sources called `names` (hub sources included); held-out ones are refused."""
    specs = {s.name: s for s in (load_catalog() if catalog is None else catalog)}
    for name in names:
        if name not in specs:
            raise UserError(
                f"calibration source {name!r} is not in {SOURCES_TOML}: known: {', '.join(specs)}"
            )
        if specs[name].holdout:
            raise UserError(f"calibration source {name!r} is held out for perplexity: name another source")
    return [specs[name] for name in names]


def holdout_documents(
    ws: Workspace, catalog: Sequence[SourceSpec] | None = None
) -> dict[str, dict[str, str]]:
    """Text set → document name → held-out text, for perplexity (sets in name order)."""
    sets: dict[str, dict[str, str]] = {}
    for spec in holdout_sources(catalog):
        files = _source_files(ws, spec)
        documents = sets.setdefault(spec.text_set or spec.lang, {})
        for path in files:
            text = _cut_lines(
                path.read_text(encoding="utf-8"), spec, path.relative_to(ws.sources()).as_posix()
            )
            prefix = f"{path.stem}/" if len(files) > 1 and spec.sections else ""
            for name, part in _documents(text, spec.sections, path.stem):
                documents[prefix + name] = part
    return dict(sorted(sets.items()))


def _documents(text: str, sections: str | None, stem: str) -> list[tuple[str, str]]:
    """(name, text) of each document of a held-out file: the file, or its sections (the text before
    the first one is the `preamble`); documents without a letter are dropped."""
    if sections is None:
        found = [(stem, text)]
    else:
        marks = list(re.finditer(sections, text, flags=re.MULTILINE))
        starts = [0, *(m.start() for m in marks)]
        names = ["preamble", *(m.group(1) if m.groups() else str(i + 1) for i, m in enumerate(marks))]
        ends = [*starts[1:], len(text)]
        found = [(name, text[a:b]) for name, a, b in zip(names, starts, ends, strict=True)]
    return [(name, part.strip() + "\n") for name, part in found if any(c.isalpha() for c in part)]


def check_holdout_unused(
    ws: Workspace, texts: Sequence[tuple[SourceFile, str]], catalog: Sequence[SourceSpec] | None = None
) -> None:
    """UserError when a calibration text holds a paragraph of held-out text: perplexity must be
    measured on text no calibration set saw (held-out files not fetched have nothing to leak)."""
    held = {
        p
        for spec in holdout_sources(catalog)
        if _source_files(ws, spec, required=False)
        for _, text in read_sources(ws, [spec])
        for p in paragraphs(text)
        if len(p) >= 40  # short lines (a URL, a heading) recur legitimately
    }
    for source, text in texts:
        leaked = next((p for p in paragraphs(text) if p in held), None)
        if leaked is not None:
            raise UserError(
                f"calibration source {source.name!r} holds held-out text ({leaked[:60]!r}…): "
                f"cut it out with `start`/`stop` in {SOURCES_TOML}"
            )


def paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs that contain a letter (page numbers and rules dropped)."""
    text = text.replace("\r\n", "\n").lstrip("\ufeff")
    return [p.strip() for p in _PARAGRAPH_BREAK.split(text) if any(c.isalpha() for c in p)]


def read_sources(ws: Workspace, specs: Sequence[SourceSpec]) -> list[tuple[SourceFile, str]]:
    """The text of every file (cut to its `start`/`stop` lines) or hub slice of `specs`, with provenance."""
    texts: list[tuple[SourceFile, str]] = []
    for spec in specs:
        if spec.hub_id is not None:
            text = _hub_text(spec)
            origin = f"{spec.origin} @ {spec.revision}"
            source = SourceFile(name=spec.name, lang=spec.lang, origin=origin, sha256=sha256_of(text))
            texts.append((source, text))
            continue
        for path in _source_files(ws, spec):
            raw = path.read_bytes()
            where = path.relative_to(ws.sources()).as_posix()
            cut = "" if spec.start is None and spec.stop is None else f" lines /{spec.start}/../{spec.stop}/"
            origin = f"{spec.origin} [{where}{cut}]"
            source = SourceFile(name=spec.name, lang=spec.lang, origin=origin, sha256=sha256_of(raw))
            texts.append((source, _cut_lines(raw.decode("utf-8"), spec, where)))
    return texts


def _source_files(ws: Workspace, spec: SourceSpec, required: bool = True) -> list[Path]:
    """The files an offline source reads, in order; none is a UserError when `required`."""
    assert spec.glob is not None
    files = sorted(ws.sources().glob(spec.glob))
    if not files and required:
        raise UserError(
            f"calibration source {spec.name!r}: no files match {ws.sources() / spec.glob}: "
            "run `make setup` to fetch the offline sources"
        )
    return files


def _cut_lines(text: str, spec: SourceSpec, where: str) -> str:
    begin, end = 0, len(text)
    for pattern, is_start in ((spec.start, True), (spec.stop, False)):
        if pattern is None:
            continue
        found = re.search(pattern, text, flags=re.MULTILINE)
        if found is None:
            raise UserError(f"calibration source {spec.name!r}: no line of {where} matches /{pattern}/")
        begin, end = (found.start(), end) if is_start else (begin, found.start())
    return text[begin:end]


def _hub_text(spec: SourceSpec) -> str:
    if not _REVISION.fullmatch(spec.revision):
        raise UserError(
            f"calibration source {spec.name!r} has no pinned revision: set a 40-hex dataset commit "
            f"as `revision` in {SOURCES_TOML}"
        )
    from datasets import load_dataset

    rows = load_dataset(
        spec.hub_id, spec.hub_config, split=spec.split, revision=spec.revision, streaming=True
    )
    parts: list[str] = []
    size = 0
    for row in rows:
        parts.append(str(row[spec.text_field]))
        size += len(parts[-1])
        if size >= spec.max_chars:
            break
    return "\n\n".join(parts)
