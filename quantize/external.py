"""Pre-quantized checkpoints the suite did not build (`EXTRA=/path/to/dir,hf:org/name@rev`).

Each joins the matrix beside the built checkpoints and is compared with the same base. Before it is
served it must prove it is a whole checkpoint of that base: config.json and every safetensors shard
present and intact, the same architecture sizes as the base, a tokenizer. Its scheme is read from
its `quantization_config` (`awq:w4a16`, `compressed-tensors:fp8-dynamic`, …), since the format, not
the method that made it, is what the file says.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from kqe.core import hub
from kqe.core.errors import UserError
from kqe.core.io import read_json_object
from kqe.core.modelstore import LocalModel
from kqe.core.records import Checkpoint, content_hash
from kqe.core.registry import HF_PREFIX, check_remote_code
from kqe.core.workspace import Workspace, safe_name
from quantize import formats, layout
from quantize.build import layout_fields, weight_bytes, weights_digest
from quantize.calibration import tokenizer_hash

log = logging.getLogger(__name__)

NAME_PREFIX = "ext-"
EXTRA_SCHEME = "extra"
"""Scheme of an extra's matrix entry until its config.json is read (the checkpoint record says)."""
_SAME_BASE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def extra_name(reference: str) -> str:
    """Checkpoint name of an extra entry: `ext-<folder name>` or `ext-<hub repo name>`."""
    stem = reference.removeprefix(HF_PREFIX).partition("@")[0].rstrip("/")
    return NAME_PREFIX + safe_name(stem.rsplit("/", 1)[-1])


def scheme_label(checkpoint_dir: Path) -> str:
    """`<format>:<scheme>` as the checkpoint's config declares it, e.g. `awq:w4a16`; `unquantized`."""
    facts = formats.read_quant_facts(checkpoint_dir)
    return "unquantized" if facts.method == "none" else f"{facts.method}:{facts.label}"


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else config


def check_same_base(checkpoint_dir: Path, base: LocalModel, reference: str) -> None:
    """UserError when the checkpoint's architecture sizes differ from the base's."""
    mine = _text_config(
        read_json_object(checkpoint_dir / "config.json", f"extra checkpoint {reference}: config.json")
    )
    theirs = _text_config(read_json_object(base.folder / "config.json", f"base {base.name}: config.json"))
    for key in _SAME_BASE_KEYS:
        if key in theirs and mine.get(key) != theirs[key]:
            raise UserError(
                f"extra checkpoint {reference} is not a checkpoint of {base.name}: {key} {mine.get(key)!r}, "
                f"the base has {theirs[key]!r}"
            )


def check_extra(ws: Workspace, reference: str, trust_remote_code: bool) -> None:
    """What can be checked of an extra before anything is built or served: a hub extra names its
    revision (what is scored must be what was asked for); a local one is a model folder whose
    config.json reads, and ships no code of its own unless trusted, as for the base."""
    if reference.startswith(HF_PREFIX):
        repo, _, revision = reference.removeprefix(HF_PREFIX).partition("@")
        if not revision:
            raise UserError(
                f"extra checkpoint {reference}: pin its revision, {reference}@<commit or tag>, so the "
                "checkpoint scored is the one asked for"
            )
        if not hub.hub_offline() and hub.cached_snapshot(repo, revision) is None:
            reason = hub.unreachable("models", repo, revision)
            if reason is not None:  # said now, not when its turn to be served comes
                raise UserError(
                    f"extra checkpoint {reference} must come from the hub but {hub.hub_endpoint()} does not "
                    f"answer ({reason}): download it where the hub answers and give its folder instead"
                )
        return
    folder = _local_extra(ws, reference)
    read_json_object(folder / "config.json", f"extra checkpoint {reference}: config.json")
    check_remote_code(folder, trust_remote_code)


def resolve_extra(ws: Workspace, reference: str) -> Path:
    """The local folder of an extra entry, downloading `hf:org/name[@rev]` from the hub first."""
    if reference.startswith(HF_PREFIX):
        from kqe.core.modelstore import model_dir
        from kqe.core.registry import resolve_model

        return model_dir(resolve_model(reference, ws), ws)
    return _local_extra(ws, reference)


def _local_extra(ws: Workspace, reference: str) -> Path:
    path = Path(reference).expanduser()
    path = path if path.is_absolute() else ws.root / path
    if not path.is_dir():
        raise UserError(f"extra checkpoint {reference}: no such folder (give a model folder or hf:org/name)")
    return path.resolve()


def external_checkpoint(ws: Workspace, base: LocalModel, reference: str) -> Checkpoint:
    """Check the extra checkpoint `reference` against `base` and describe it."""
    directory = resolve_extra(ws, reference)
    if not (directory / "config.json").is_file():
        raise UserError(f"extra checkpoint {reference}: {directory} has no config.json")
    layout.read_tensors(directory)  # every shard present and whole
    check_same_base(directory, base, reference)
    try:
        tokenizer_hash(directory)
    except UserError:
        raise UserError(
            f"extra checkpoint {reference} has no tokenizer: copy the base's tokenizer files into {directory}"
        ) from None
    config = read_json_object(directory / "config.json", f"extra checkpoint {reference}: config.json")
    record = Checkpoint(
        name=extra_name(reference),
        scheme=scheme_label(directory),
        model=base.name,
        path=str(directory),
        recipe={"quantization_config": config.get("quantization_config")},
        calibration_hash=None,
        package_versions={},
        wall_s=0.0,
        peak_rss_bytes=0,
        disk_bytes=weight_bytes(directory),
        key=content_hash({"origin": reference, "weights": weights_digest(ws, base.name, directory)}),
        origin=reference,
        **layout_fields(directory, base.folder),
    )
    log.info("extra checkpoint %s (%s) from %s", record.name, record.scheme, directory)
    return record
