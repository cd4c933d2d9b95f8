"""Atomic writes and crash-tolerant JSON Lines: finished results are never half-written or lost.

The write rule: kqe writes only files of its own output folders, and never through a symbolic link.
A link where kqe would write (a file, or a folder it makes and owns such as `cards/` or `logs/`) is
refused with one line instead of being followed, so nothing outside those folders is touched. The
roots (the results folder, the calibration_data folder, KQE_HOME: `register_write_roots`) may be links:
where they point is the user's choice; below a root, no folder on the way to what kqe writes may be.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, TypeVar

from pydantic import BaseModel

from kqe.core.errors import UserError
from kqe.core.faults import pause_point

T = TypeVar("T", bound=BaseModel)
_UMASK = os.umask(0)
os.umask(_UMASK)


def sha256_of(data: str | bytes) -> str:
    """Hex sha256 of bytes, or of text as UTF-8."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


MAX_READ_BYTES = 64 * 2**20
"""The most kqe reads of a file it is given (a leaderboard, a per-item or answer file, a config, a
recipe table): far above any it writes, and a bound on what a mistaken `/dev/zero` can cost."""


def shown(path: Path | str) -> str:
    """`path` as an error line names it: whole up to 300 characters (any path a user types), else its
    start and end and its length (a 5,000-character name would make the one line 5,000 characters)."""
    name = str(path)
    return name if len(name) <= 300 else f"{name[:120]}…{name[-60:]} ({len(name):,} characters)"


def _mode_problem(mode: int) -> str | None:
    """What a file of this `st_mode` is when it is not a regular file, in words; None when it is one."""
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if not stat.S_ISREG(mode):
        return "is not a regular file (a device, FIFO or socket)"
    return None


def file_problem(path: Path) -> str | None:
    """Why `path` is no regular file to read, in words (`not found`, `is a symbolic link to nothing`,
    `is a folder, not a file`, `is not a regular file (…)`, `cannot be read: …`), or None: the one
    wording of every path check, so that a folder, device or FIFO is never said to be "not found"."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "is a symbolic link to nothing" if os.path.islink(path) else "not found"
    except OSError as err:  # a loop of links, a name too long, no right to look
        return f"cannot be read: {err.strerror}"
    return _mode_problem(mode)


def require_file(path: Path, what: str, fix: str) -> Path:
    """`path` when it is a regular file; else a UserError `<what> <path> <file_problem>: <fix>`."""
    problem = file_problem(path)
    if problem is not None:
        raise UserError(f"{what} {shown(path)} {problem}: {fix}")
    return path


def read_bytes(path: Path, what: str) -> bytes:
    """The bytes of the regular file `path`, at most MAX_READ_BYTES; UserError naming `what` when it is
    absent, a folder, not a regular file (a device, a FIFO: never waited on), larger, or unreadable."""
    try:  # O_NONBLOCK: opening a FIFO does not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        require_file(path, what, "pass an existing file")  # says what the path is, when that is why
        raise UserError(f"{what} {shown(path)} cannot be read: {err.strerror}") from None
    problem = _mode_problem(os.fstat(fd).st_mode)
    if problem is not None:
        os.close(fd)
        raise UserError(f"{what} {path} {problem}: pass the file itself")
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(MAX_READ_BYTES + 1)
        except OSError as err:
            raise UserError(f"{what} {path} cannot be read: {err.strerror}") from None
    if len(data) > MAX_READ_BYTES:
        raise UserError(
            f"{what} {path} is larger than {MAX_READ_BYTES // 2**20} MiB, the most kqe reads: "
            "is it the right file?"
        )
    return data


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of `path` (a byte-order mark dropped); UserError naming `what` when it is absent,
    a folder, not a regular file, too large (`read_bytes`), unreadable or not text."""
    data = read_bytes(path, what)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UserError(f"{what} {path} is not UTF-8 text (byte {err.start}): save it as UTF-8") from None
    if "\0" in text:
        raise UserError(f"{what} {path} holds NUL bytes: it is binary, not a text file")
    return text


MAX_NESTING = 64
"""The deepest nesting of arrays and objects (tables) kqe reads in JSON or TOML it is given: model configs
nest 3 deep; deeper input is refused before Python's recursive parsers overflow their stack."""


class NestingError(ValueError):
    """JSON or TOML nested deeper than MAX_NESTING, or a JSON object that names one key twice."""


def _reject_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; a key named twice is refused (readers disagree on which wins)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        repeated = next(key for key in value if sum(name == key for name, _ in pairs) > 1)
        raise NestingError(f"key {repeated!r} appears twice in one object")
    return value


def check_nesting(value: Any) -> Any:
    """`value` (parsed JSON or TOML) when no array or object in it nests deeper than MAX_NESTING; else
    NestingError (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth >= MAX_NESTING:
                    raise NestingError(f"nested deeper than {MAX_NESTING} levels")
                stack.append((child, depth + 1))
    return value


def loads_json(text: str | bytes) -> Any:
    """The JSON value of `text`: the one parser of JSON kqe is given. ValueError when it is not JSON
    (json.JSONDecodeError), nests deeper than MAX_NESTING or repeats a key (NestingError)."""
    try:
        value = json.loads(text, object_pairs_hook=_reject_repeated_keys)
    except RecursionError:
        raise NestingError(f"nested deeper than {MAX_NESTING} levels") from None
    return check_nesting(value)


def loads_toml(text: str) -> dict[str, Any]:
    """The TOML table of `text`, bounded like `loads_json`: tomllib.TOMLDecodeError when it is not TOML,
    NestingError when it nests deeper than MAX_NESTING."""
    try:
        return check_nesting(tomllib.loads(text))
    except RecursionError:
        raise NestingError(f"nested deeper than {MAX_NESTING} levels") from None


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in `path`; UserError naming `what` when it is not one (see `read_text`)."""
    try:
        value = loads_json(read_text(path, what))
    except NestingError as err:
        raise UserError(f"{what} {path} is not JSON kqe reads ({err}): fix or replace it") from None
    except ValueError as err:
        raise UserError(f"{what} {path} is not valid JSON ({err}): fix or replace it") from None
    if not isinstance(value, dict):
        raise UserError(
            f"{what} {path} holds a JSON {type(value).__name__}, not an object: is it the right file?"
        )
    return value


MAX_SAFETENSORS_HEADER = 100 * 2**20
"""The largest JSON header a safetensors file may declare (the format's own limit, 100 MB)."""


def read_safetensors_header(path: Path) -> tuple[int, dict[str, Any]]:
    """The length and JSON header of the safetensors file `path` (8-byte little-endian length, then
    JSON), read within its bounds: ValueError saying why when it is no regular file, declares a header
    longer than the file or MAX_SAFETENSORS_HEADER, or holds no JSON object (see `loads_json`); OSError
    when it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a folder opens too: fstat says what it is
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        problem = _mode_problem(info.st_mode)
        if problem is not None:
            raise ValueError(f"it {problem}")
        size = info.st_size
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise ValueError("shorter than its 8-byte header length")
        length = int.from_bytes(prefix, "little")
        if length > min(size - 8, MAX_SAFETENSORS_HEADER):
            raise ValueError(f"it declares a {length:,}-byte header in {size:,} bytes")
        header = loads_json(handle.read(length))
    if not isinstance(header, dict):
        raise ValueError(f"its header is a JSON {type(header).__name__}, not an object")
    return length, header


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (weights files are GBs)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_WRITE_ROOTS: set[Path] = set()
"""Every registered write root, absolute (not resolved: a root that is a link stays one)."""


def register_write_roots(*roots: Path) -> None:
    """Declare folders kqe writes under (a workspace's results, calibration_data and KQE_HOME): each may
    itself be a link; `refuse_link` refuses a link at any folder below one on the way to a path."""
    _WRITE_ROOTS.update(Path(os.path.abspath(root)) for root in roots)


def _linked_part(path: Path) -> Path | None:
    """The first symbolic link among `path` and the folders above it below its deepest write root (only
    `path` itself when no root holds it), or None."""
    full = Path(os.path.abspath(path))
    if full in _WRITE_ROOTS:
        return None  # a root may be a link
    roots = [root for root in _WRITE_ROOTS if full.is_relative_to(root)]
    part = max(roots, key=lambda root: len(root.parts)) if roots else full.parent
    for name in full.relative_to(part).parts:
        part = part / name
        if part.is_symlink():
            return part
    return None


def refuse_link(path: Path) -> Path:
    """`path`, unless it or a folder on the way to it below its write root is a symbolic link: then a
    UserError naming the link (kqe never writes or deletes through one)."""
    link = _linked_part(path)
    if link is not None:
        way = "" if link == Path(os.path.abspath(path)) else f" on the way to {path}"
        raise UserError(
            f"{path if not way else link} is a symbolic link{way}: kqe writes only its own files, never "
            "through a link; remove the link (or point the whole results folder or KQE_HOME elsewhere)"
        )
    return path


def owned_folder(path: Path) -> Path:
    """Create `path` (a folder kqe writes into) if needed; a link there is refused, not followed."""
    try:
        refuse_link(path).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot make the folder {path}: {err.strerror}; move what is in its place") from None
    return path


def check_writable_folder(path: Path, what: str) -> None:
    """Refuse, before any work, a folder given for output (`what`: the option, e.g. `--out`) that cannot
    be made or written into: a file on its way, a read-only file system, no rights. It is made, and a
    file is created in it and removed, so a later write fails only if the disk fills."""
    try:
        refuse_link(path).mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise UserError(f"{what} {path}: cannot write there ({reason}); give a writable folder") from None


def open_writable(path: Path, *, append: bool = False) -> IO[str]:
    """Open a file kqe appends to (a log, a lock, per-item lines), never following a link planted at
    its name."""
    owned_folder(path.parent)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as err:
        if path.is_symlink():
            refuse_link(path)
        raise UserError(f"cannot write {path}: {err.strerror}; check the rights of its folder") from None
    return os.fdopen(fd, "a" if append else "w", encoding="utf-8")


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write `text` to `path` so that readers see the old file or the new one, never a torn one (a
    link at `path` is refused: replacing it would silently turn the user's link into a file)."""
    try:
        refuse_link(path).parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:  # a read-only or full results folder is the user's to fix, not a bug
        raise UserError(f"cannot write {path}: {err.strerror}; check the rights of its folder") from None
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8") if isinstance(text, str) else text)
            handle.flush()
            pause_point(f"write {path.name}")  # fault tests kill here: `path` must stay as it was
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"cannot write {path}: {err.strerror}; free disk space or check its folder") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(path: Path, record: BaseModel) -> None:
    write_atomic(path, record.model_dump_json(indent=2) + "\n")


def read_record(path: Path, kind: type[T]) -> T:
    return kind.model_validate_json(path.read_text(encoding="utf-8-sig"))


def read_jsonl(path: Path, kind: type[T]) -> list[T]:
    """Read records; a torn last line (a crash mid-write) is dropped, any other bad line is an error."""
    if not path.exists():
        return []
    # split on "\n" only: str.splitlines() also breaks at U+2028 and U+0085, which text fields may hold
    lines = path.read_text(encoding="utf-8-sig").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(kind.model_validate_json(line))
        except ValueError:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number}: not a {kind.__name__} record") from None
    return records


class JsonlAppender:
    """Appends records one line at a time, flushed, so a crash loses at most the record in flight."""

    def __init__(self, path: Path, keep: Iterable[BaseModel] = ()) -> None:
        # Rewrite what is kept first, so a torn tail line from an earlier crash is gone.
        write_atomic(path, "".join(r.model_dump_json() + "\n" for r in keep))
        self._handle = open_writable(path, append=True)

    def append(self, record: BaseModel) -> None:
        self._handle.write(record.model_dump_json() + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
