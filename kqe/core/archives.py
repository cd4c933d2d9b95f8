"""Reading files out of package archives: wheels (zip), source distributions (tar) and Debian packages
(an `ar` container around a gz or xz data tar), without installing or unpacking them to disk."""

from __future__ import annotations

import gzip
import io
import re
import tarfile
import zipfile
from pathlib import Path

from kqe.core.errors import UserError


def members(archive: Path) -> list[str]:
    """The file members of a wheel, an sdist or the data tar of a .deb."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            return wheel.namelist()
    with open_tar(archive) as tar:
        return [member.name for member in tar.getmembers() if member.isfile()]


def open_tar(archive: Path) -> tarfile.TarFile:
    """An sdist, or the data tar of a .deb (gz or xz; the pinned packages use xz)."""
    if archive.suffix != ".deb":
        return tarfile.open(archive)
    found = ar_members(archive.read_bytes())
    data = next((found[name] for name in sorted(found) if name.startswith("data.tar")), None)
    if data is None:
        raise UserError(f"{archive} holds no data.tar member: remove it and run `make setup`")
    return tarfile.open(fileobj=io.BytesIO(data))


def ar_members(data: bytes) -> dict[str, bytes]:
    """The members of a Unix `ar` archive (the container of a .deb) by name."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive")
    found: dict[str, bytes] = {}
    offset = 8
    while offset + 60 <= len(data):
        header = data[offset : offset + 60]
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii"))
        found[name] = data[offset + 60 : offset + 60 + size]
        offset += 60 + size + size % 2  # members start at even offsets
    return found


def read_member(archive: Path, member: str) -> bytes:
    """One member's bytes; a .deb's `.gz` documentation gunzipped (wheels and sdists hold the text)."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            return wheel.read(member)
    with open_tar(archive) as tar:
        handle = tar.extractfile(member)
        if handle is None:
            raise ValueError(f"{archive.name}: {member} is not a file")
        data = handle.read()
    return gzip.decompress(data) if archive.suffix == ".deb" and member.endswith(".gz") else data


def read_matching(archive: Path, pattern: str) -> dict[str, bytes]:
    """Every file member of a tar or .deb whose path matches `pattern` (a regex over the whole path),
    read in one pass over the archive (an xz tar is not read again per member)."""
    found: dict[str, bytes] = {}
    with open_tar(archive) as tar:
        for info in tar:
            if info.isfile() and re.fullmatch(pattern, info.name):
                handle = tar.extractfile(info)
                if handle is not None:
                    found[info.name] = handle.read()
    return dict(sorted(found.items()))
