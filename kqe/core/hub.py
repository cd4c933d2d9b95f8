"""Whether the Hugging Face hub answers, asked once before a run needs something from it: a dataset or
a model that must be downloaded is said in one line up front, not after retries and warnings."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Literal

from kqe.core.env import env_value

HUB_ENDPOINT = "https://huggingface.co"
"""Where the hub is asked when `HF_ENDPOINT` (huggingface_hub's own variable) is not set."""
PROBE_TIMEOUT_S = 10.0


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", HUB_ENDPOINT).rstrip("/")


def hub_offline() -> bool:
    """`HF_HUB_OFFLINE` as huggingface_hub reads it (its variable: 1/on/yes/true, any case, is on; any
    other value is off, so kqe does not refuse what the hub library accepts)."""
    return (env_value("HF_HUB_OFFLINE") or "").strip().upper() in ("1", "ON", "YES", "TRUE")


def unreachable(kind: Literal["models", "datasets"], repo: str, revision: str) -> str | None:
    """Why the hub does not answer for `repo@revision`, or None when it answers at all: any HTTP answer
    counts (a wrong revision or a gated repo is the download's own error, said by it)."""
    url = f"{hub_endpoint()}/api/{kind}/{repo}/revision/{revision}"
    try:
        urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S)
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError) as err:
        return str(getattr(err, "reason", err))
    return None


def cached_snapshot(repo: str, revision: str) -> Path | None:
    """The folder huggingface_hub's cache already holds for model `repo` at `revision` (nothing is
    downloaded), None when it holds none."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo, revision=revision, local_files_only=True))
    except Exception:  # not cached, or not that revision: a download is needed
        return None
