"""Where things live: the project tree (results, calibration sets) and the cache (models, checkpoints)."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from kqe.core.env import env_value
from kqe.core.errors import UserError
from kqe.core.io import refuse_link, register_write_roots, sha256_of

_NAME_PUNCTUATION = "._-"
"""The punctuation a folder name keeps; every other character that is no letter, digit or mark is `_`."""
_NAME_CATEGORIES = ("L", "N", "M")
"""Unicode categories a folder name keeps: letters and digits of any script (Hangul 한국어, Latin é,
Han, Arabic digits …) and the combining marks some scripts write letters with."""


def _kept(char: str) -> bool:
    return char in _NAME_PUNCTUATION or unicodedata.category(char)[0] in _NAME_CATEGORIES


def safe_name(name: str) -> str:
    """A file-name-safe form of a model or checkpoint name that cannot escape its folder: NFC-normalised
    (a name typed as decomposed jamo and the same name composed are one name, as on macOS file systems),
    each run of characters that are not letters, digits, marks or `._-` (path separators, blanks,
    control characters) made one `_`, leading and trailing `.`/`_` dropped (so never `..`); a name
    left without a letter or digit is a UserError."""
    composed = unicodedata.normalize("NFC", name)
    runs = (("".join(run) if kept else "_") for kept, run in groupby(composed, key=_kept))
    cleaned = "".join(runs).strip("._")
    if not any(char.isalnum() for char in cleaned):
        raise UserError(f"name {name!r} has no letter or digit to name a folder after: rename it")
    return cleaned


def unique_file_stem(name: str, fallback: str) -> str:
    """A file stem for `name` that no other name shares: the name itself when it is a plain file name
    already (`awq-w4a16-ko70`, `한국어-awq`); otherwise its safe form (`fallback` where it has no letter
    or digit) plus 8 hex digits of the name's hash, so that `a/b` and `a_b` get two files and `-` one."""
    try:
        stem = safe_name(name)
    except UserError:  # no letter or digit in it: a leaderboard row may say anything
        stem = fallback
    if stem != name:  # decomposed Hangul too: its composed twin may be another name
        stem = f"{stem}-{sha256_of(name)[:8]}"
    return stem


def _resolved(path: Path, what: str) -> Path:
    """`path` made absolute with its links followed; UserError naming `what` when no call can resolve
    it (a loop of symbolic links, a name too long)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError) as err:  # Python 3.11 says RuntimeError for a loop of links
        reason = err.strerror if isinstance(err, OSError) else "a loop of symbolic links"
        raise UserError(f"{what} {path} cannot be used ({reason}): point it at a real folder") from None


@dataclass(frozen=True)
class Workspace:
    """Roots of the project tree and of the cache; every path the suite writes derives from these."""

    root: Path
    """Project root: holds `results/` and `calibration_data/`."""
    cache: Path
    """Cache root (`KQE_HOME`, default `~/.cache/kqe`): models, checkpoints, source texts, vLLM cache."""
    serve_venv: Path
    """Virtual environment holding the serving engine (`KQE_SERVE_VENV`, default `<root>/.venv-serve`)."""

    def __post_init__(self) -> None:
        # the roots may be links (the user's choice); what kqe makes below them may not
        register_write_roots(self.root / "results", self.root / "calibration_data", self.cache)

    @classmethod
    def from_env(cls, root: Path | None = None) -> Workspace:
        root = _resolved(root or Path.cwd(), "the current folder")
        # empty is unset, as for every KQE_ variable (kqe.core.env) and scripts/setup.sh's ${KQE_HOME:-…}
        cache = Path(env_value("KQE_HOME") or Path.home() / ".cache" / "kqe").expanduser()
        serve = Path(env_value("KQE_SERVE_VENV") or root / ".venv-serve").expanduser()
        return cls(
            root=root, cache=_resolved(cache, "KQE_HOME"), serve_venv=_resolved(serve, "KQE_SERVE_VENV")
        )

    def setup_hint(self) -> str:
        """How to fill the cache: `make setup`, naming KQE_HOME when it is set (a mistyped one is
        the usual reason the cache looks empty)."""
        home = env_value("KQE_HOME")
        return f"run `make setup` with KQE_HOME={home}, or fix KQE_HOME" if home else "run `make setup`"

    def check_writable(self, model: str) -> None:
        """Refuse, before any work, a symbolic link on the way to a folder kqe writes for `model` (its
        results, calibration sets and checkpoints): one line naming the link, nothing written."""
        for folder in (self.results(model), self.calibration(model), self.checkpoints(model)):
            refuse_link(folder)

    def results(self, model: str) -> Path:
        return self.root / "results" / safe_name(model)

    def calibration(self, model: str) -> Path:
        return self.root / "calibration_data" / safe_name(model)

    def models(self) -> Path:
        return self.cache / "models"

    def checkpoints(self, model: str) -> Path:
        return self.cache / "checkpoints" / safe_name(model)

    def sources(self) -> Path:
        return self.cache / "sources"

    def vllm_cache(self) -> Path:
        return self.cache / "vllm"
