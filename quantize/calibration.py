"""Calibration sets with a controlled Korean/English token mix, cut with the target model's tokenizer.

Every sample is a window of exactly `seq_len` model tokens (the special tokens the tokenizer adds,
e.g. BOS, included) whose text re-tokenizes to the same ids, so llmcompressor sees the tokens that
were counted. Windows are cut per language from the paragraphs of its sources; they do not overlap
unless a language's text is too short, and then they overlap by at most half a window (spread
evenly over the text). Held-out sources (`holdout = true`) are never read here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from kqe.errors import UserError
from kqe.io import read_record, sha256_of, write_atomic, write_record
from kqe.records import CalibrationSet, SourceFile, content_hash
from kqe.workspace import Workspace, safe_name

log = logging.getLogger(__name__)

SOURCES_TOML = Path(__file__).resolve().parents[1] / "calibration_data" / "sources.toml"
LANGS = ("ko", "en")
NAMED_MIXES: dict[str, dict[str, float]] = {
    "ko100": {"ko": 1.0},
    "ko70": {"ko": 0.7, "en": 0.3},
    "en100": {"en": 1.0},
}
DEFAULT_MIX = "ko70"
DEFAULT_SAMPLES = 64
DEFAULT_SEQ_LEN = 384
MAX_SHARE_GAP = 0.05
"""Largest allowed gap between the asked and the measured token share of a language."""
BUILDER_VERSION = 1
"""Bumped when the cutting rules change, so older sets are not reused under the same key."""
_MAX_SHIFT = 16
"""Tokens a window start may move to find text that re-tokenizes exactly (byte-level BPE splits
Hangul syllables across tokens, so some cut points decode to broken characters)."""
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
)
"""Files that make up a tokenizer: hashed into keys and copied verbatim into built checkpoints."""
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

    @model_validator(mode="after")
    def _one_location(self) -> SourceSpec:
        if (self.glob is None) == (self.hub_id is None):
            raise ValueError("give exactly one of `glob` (offline file) or `hub_id` (online dataset)")
        return self


def load_catalog(path: Path = SOURCES_TOML) -> list[SourceSpec]:
    """Every source declared in `path`, offline and online, held-out ones included."""
    try:
        entries = tomllib.loads(path.read_text(encoding="utf-8")).get("source", [])
        return [SourceSpec.model_validate(entry) for entry in entries]
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise UserError(f"calibration sources {path}: {first}: fix the file") from None


def default_sources(catalog: Sequence[SourceSpec] | None = None) -> list[SourceSpec]:
    """The offline sources that may feed calibration (held-out and hub sources excluded)."""
    specs = load_catalog() if catalog is None else catalog
    return [s for s in specs if s.glob is not None and not s.holdout]


def holdout_sources(catalog: Sequence[SourceSpec] | None = None) -> list[SourceSpec]:
    """The sources reserved for perplexity."""
    specs = load_catalog() if catalog is None else catalog
    return [s for s in specs if s.holdout]


def parse_mix(text: str) -> dict[str, float]:
    """`ko70`/`ko100`/`en100` or `ko=0.7,en=0.3` → {lang: share}; shares are ≥ 0 and sum to 1."""
    if text in NAMED_MIXES:
        return dict(NAMED_MIXES[text])
    mix: dict[str, float] = {}
    for part in text.split(","):
        lang, sep, value = part.partition("=")
        lang = lang.strip()
        try:
            share = float(value)
        except ValueError:
            share = math.nan
        if not sep or math.isnan(share):
            raise UserError(
                f"calibration mix {text!r}: write `ko=0.7,en=0.3` or one of {', '.join(NAMED_MIXES)}"
            )
        if lang in mix:
            raise UserError(f"calibration mix {text!r}: {lang} is given twice")
        mix[lang] = share
    check_mix(mix, text)
    return mix


def check_mix(mix: dict[str, float], label: str) -> None:
    unknown = sorted(set(mix) - set(LANGS))
    if unknown:
        known = ", ".join(LANGS)
        raise UserError(f"calibration mix {label!r}: unknown language {unknown[0]!r}; known: {known}")
    negative = [lang for lang, share in mix.items() if share < 0]
    if negative:
        raise UserError(f"calibration mix {label!r}: share of {negative[0]} is negative")
    if abs(sum(mix.values()) - 1.0) > 1e-6:
        raise UserError(f"calibration mix {label!r}: shares sum to {sum(mix.values()):g}, not 1")


def allocate(samples: int, mix: dict[str, float]) -> dict[str, int]:
    """Samples per language: round(samples*share), by largest remainder so the counts sum to `samples`."""
    exact = {lang: samples * share for lang, share in mix.items()}
    counts = {lang: math.floor(value) for lang, value in exact.items()}
    left = samples - sum(counts.values())
    for lang in sorted(mix, key=lambda lang: (counts[lang] - exact[lang], lang))[:left]:
        counts[lang] += 1
    return counts


def paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs that contain a letter (page numbers and rules dropped)."""
    text = text.replace("\r\n", "\n").lstrip("\ufeff")
    return [p.strip() for p in _PARAGRAPH_BREAK.split(text) if any(c.isalpha() for c in p)]


def hangul_letters(text: str) -> tuple[int, int]:
    """(Hangul letters, all letters) in `text`: syllables and jamo count as Hangul."""
    letters = [c for c in text if c.isalpha()]
    hangul = sum(
        1
        for c in letters
        if 0xAC00 <= ord(c) <= 0xD7A3 or 0x1100 <= ord(c) <= 0x11FF or 0x3130 <= ord(c) <= 0x318F
    )
    return hangul, len(letters)


def read_sources(ws: Workspace, specs: Sequence[SourceSpec]) -> list[tuple[SourceFile, str]]:
    """The raw text of every file (or hub slice) of `specs`, with its provenance."""
    texts: list[tuple[SourceFile, str]] = []
    for spec in specs:
        if spec.hub_id is not None:
            text = _hub_text(spec)
            origin = f"{spec.origin} @ {spec.revision}"
            source = SourceFile(name=spec.name, lang=spec.lang, origin=origin, sha256=sha256_of(text))
            texts.append((source, text))
            continue
        assert spec.glob is not None
        files = sorted(ws.sources().glob(spec.glob))
        if not files:
            raise UserError(
                f"calibration source {spec.name!r}: no files match {ws.sources() / spec.glob}: "
                "run `make setup` to fetch the offline sources"
            )
        for path in files:
            raw = path.read_bytes()
            origin = f"{spec.origin} [{path.relative_to(ws.sources()).as_posix()}]"
            source = SourceFile(name=spec.name, lang=spec.lang, origin=origin, sha256=sha256_of(raw))
            texts.append((source, raw.decode("utf-8")))
    return texts


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


def tokenizer_hash(tokenizer_dir: Path) -> str:
    """sha256 over the tokenizer files present in `tokenizer_dir` (names and bytes)."""
    digest = hashlib.sha256()
    present = [tokenizer_dir / name for name in TOKENIZER_FILES if (tokenizer_dir / name).is_file()]
    if not present:
        raise UserError(f"no tokenizer files in {tokenizer_dir}: point at a model directory with a tokenizer")
    for path in present:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def build_calibration_set(
    ws: Workspace,
    model: str,
    tokenizer_dir: Path,
    mix: dict[str, float],
    samples: int,
    seq_len: int,
    seed: int,
    name: str,
    sources: Sequence[SourceSpec] | None = None,
) -> CalibrationSet:
    """Build (or reuse) `samples` windows of `seq_len` tokens with `mix` token shares, chosen under `seed`.

    `sources` defaults to the offline sources of `calibration_data/sources.toml`; held-out sources
    are dropped whatever is passed. Writes `<name>-<key>.jsonl` and `<name>-<key>.json` under
    `ws.calibration(model)`; the same inputs give the same key and byte-identical files.
    """
    check_mix(mix, name)
    if samples < 1 or seq_len < 8:
        raise UserError(f"calibration set {name!r}: need samples ≥ 1, seq_len ≥ 8 (got {samples}, {seq_len})")
    specs = [s for s in (default_sources() if sources is None else sources) if not s.holdout]
    texts = read_sources(ws, specs)
    missing = [lang for lang, share in mix.items() if share > 0 and all(s.lang != lang for s, _ in texts)]
    if missing:
        raise UserError(
            f"calibration mix {name!r} asks for {missing[0]} text but no {missing[0]} source is declared"
        )
    key = content_hash(
        {
            "builder": BUILDER_VERSION,
            "sources": [source.model_dump(mode="json") for source, _ in texts],
            "mix": mix,
            "samples": samples,
            "seq_len": seq_len,
            "seed": seed,
            "tokenizer": tokenizer_hash(tokenizer_dir),
        }
    )
    stem = f"{safe_name(name)}-{key}"
    record_path = ws.calibration(model) / f"{stem}.json"
    samples_path = ws.calibration(model) / f"{stem}.jsonl"
    if record_path.exists() and samples_path.exists():
        record = read_record(record_path, CalibrationSet)
        if record.sha256 == sha256_of(samples_path.read_bytes()):
            log.info("calibration set %s reused (%s)", name, record_path)
            return record
    lines, tokens_by_lang, hangul = _cut_samples(tokenizer_dir, texts, mix, samples, seq_len, seed)
    _check_shares(mix, tokens_by_lang, name, samples)
    body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    write_atomic(samples_path, body)
    record = CalibrationSet(
        name=name,
        mix=mix,
        tokenizer=str(tokenizer_dir),
        samples=samples,
        seq_len=seq_len,
        seed=seed,
        sources=[source for source, _ in texts],
        tokens_by_lang=tokens_by_lang,
        hangul_fraction=hangul,
        path=str(samples_path),
        sha256=sha256_of(body),
    )
    write_record(record_path, record)
    log.info("calibration set %s: %s tokens, Hangul %.3f → %s", name, tokens_by_lang, hangul, samples_path)
    return record


def _cut_samples(
    tokenizer_dir: Path,
    texts: list[tuple[SourceFile, str]],
    mix: dict[str, float],
    samples: int,
    seq_len: int,
    seed: int,
) -> tuple[list[dict[str, Any]], dict[str, int], float]:
    """The sample lines (shuffled under `seed`), tokens per language and the overall Hangul share."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    content_len = seq_len - tokenizer.num_special_tokens_to_add()
    streams = {
        lang: "\n".join(p for source, text in texts if source.lang == lang for p in paragraphs(text))
        for lang in mix
    }
    ids = {lang: tokenizer(stream, add_special_tokens=False)["input_ids"] for lang, stream in streams.items()}
    counts = allocate(samples, mix)
    chosen: dict[str, list[str]] = {}
    for lang, need in counts.items():
        picked = _choose_windows(tokenizer, ids[lang], content_len, need, random.Random(f"{seed}/{lang}"))
        if picked is None:
            raise _too_many_samples(tokenizer, ids, content_len, mix, samples, seq_len)
        chosen[lang] = picked
    lines = []
    tokens_by_lang = dict.fromkeys(mix, 0)
    hangul_total = letters_total = 0
    for lang, windows in chosen.items():
        for text in windows:
            tokens = len(tokenizer(text)["input_ids"])  # as the model will see it, specials included
            hangul, letters = hangul_letters(text)
            tokens_by_lang[lang] += tokens
            hangul_total, letters_total = hangul_total + hangul, letters_total + letters
            share = round(hangul / letters, 4) if letters else 0.0
            lines.append({"text": text, "lang": lang, "tokens": tokens, "hangul_fraction": share})
    random.Random(seed).shuffle(lines)
    return lines, tokens_by_lang, (hangul_total / letters_total if letters_total else 0.0)


def _choose_windows(
    tokenizer: Any, ids: list[int], length: int, need: int, rng: random.Random
) -> list[str] | None:
    """`need` window texts: a seeded pick among disjoint windows, else evenly spread half-overlapping
    ones; None when even those are too few."""
    if need == 0:
        return []
    disjoint = _clean_windows(tokenizer, ids, length, stride=length)
    if need <= len(disjoint):
        return [disjoint[i] for i in sorted(rng.sample(range(len(disjoint)), need))]
    dense = _clean_windows(tokenizer, ids, length, stride=max(1, length // 2))
    if need > len(dense):
        return None
    step = (len(dense) - 1) / (need - 1) if need > 1 else 0.0
    log.info("calibration: %d windows from %d tokens need overlap (≤ half a window)", need, len(ids))
    return [dense[round(i * step)] for i in range(need)]


def _clean_windows(tokenizer: Any, ids: list[int], length: int, stride: int) -> list[str]:
    """Texts of windows of `length` tokens, at least `stride` tokens apart, that re-tokenize exactly."""
    windows = []
    start = 0
    while start + length <= len(ids):
        for pos in range(start, min(start + _MAX_SHIFT, len(ids) - length + 1)):
            window = ids[pos : pos + length]
            text = tokenizer.decode(window, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            if tokenizer(text, add_special_tokens=False)["input_ids"] == window:
                windows.append(text)
                start = pos + stride
                break
        else:
            start += _MAX_SHIFT
    return windows


def _too_many_samples(
    tokenizer: Any, ids: dict[str, list[int]], length: int, mix: dict[str, float], samples: int, seq_len: int
) -> UserError:
    capacity = {
        lang: len(_clean_windows(tokenizer, ids[lang], length, stride=max(1, length // 2)))
        for lang, share in mix.items()
        if share > 0
    }
    fits = (
        n for n in range(samples - 1, 0, -1) if all(allocate(n, mix)[g] <= c for g, c in capacity.items())
    )
    most = next(fits, 0)
    shown = ", ".join(f"{lang}: {count} windows" for lang, count in capacity.items())
    return UserError(
        f"calibration: {samples} samples of {seq_len} tokens exceed the sources ({shown}, half-overlap "
        f"allowed); at most {most} samples at this mix: lower --calib-samples or add sources"
    )


def _check_shares(mix: dict[str, float], tokens_by_lang: dict[str, int], name: str, samples: int) -> None:
    total = sum(tokens_by_lang.values())
    for lang, asked in mix.items():
        measured = tokens_by_lang.get(lang, 0) / total
        if abs(measured - asked) > MAX_SHARE_GAP + 1e-9:
            raise UserError(
                f"calibration mix {name!r}: {lang} token share {measured:.2f} is more than "
                f"{MAX_SHARE_GAP:.0%} from the asked {asked:.2f} with {samples} samples: use more samples"
            )
