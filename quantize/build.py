"""Checkpoint builds: the bf16 base as is, quantized schemes in a child process (llmcompressor or autoawq).

A built checkpoint lives in `ws.checkpoints(model)/<scheme>-<key>/` with its `checkpoint.json`. A
build holds `<scheme>-<key>.lock` (released by the kernel if the process dies), writes into a fresh
hidden `.<scheme>-<key>.<random>.tmp` folder, and renames it into place only after the output has
been verified; the record is written last. So a folder with that name and a record of this format is
complete, and a killed build leaves only `.tmp` folders that the next build of that key deletes. The
child gets SIGKILL when its parent dies (`setpriv --pdeathsig`), so it cannot go on writing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kqe.core.errors import UserError
from kqe.core.io import loads_json, read_record, refuse_link, sha256_file, write_atomic, write_record
from kqe.core.modelstore import LocalModel
from kqe.core.records import SCHEMA_VERSION, CalibrationSet, Checkpoint, content_hash, package_versions
from kqe.core.schemes import BASE_SCHEME, SchemeInfo, scheme_info
from kqe.core.workspace import Workspace
from quantize import layout
from quantize.build_process import build_lock, failure, run_child
from quantize.calibration import tokenizer_hash
from quantize.llmcompressor_child import REPORT_NAME, OneshotJob
from quantize.schemes import AUTOAWQ_INSTALL, RECIPES, Recipe

log = logging.getLogger(__name__)

CHECKPOINT_RECORD = "checkpoint.json"
PACKAGES = ("llmcompressor", "compressed-tensors", "transformers", "torch")
AUTOAWQ_PACKAGES = ("autoawq", "transformers", "torch")
_CHILD_MODULES = {"llmcompressor": "quantize.llmcompressor_child", "autoawq": "quantize.autoawq_child"}
_DIGEST_CACHE = ".base-digests.json"
"""Per-file sha256 of base weights, keyed by path, size and mtime: big models are hashed once."""


def build_checkpoint(
    ws: Workspace,
    base: LocalModel,
    scheme: str,
    recipe: Recipe,
    calibration: CalibrationSet | None,
    progress: Callable[[int, int], None] | None = None,
    name: str | None = None,
    dtype: str = "bfloat16",
) -> Checkpoint:
    """Build (or reuse) the `scheme` checkpoint of `base` from its bf16 weights.

    `calibration` is used only by schemes that need it. `name` is the checkpoint's name in the
    matrix (default: the scheme; e.g. `awq-w4a16-ko70`); builds are keyed by their inputs, not by
    name. `dtype` is what the base is loaded and calibrated in (float32 on CPUs whose bf16 products
    are slow); the output's 16-bit tensors are bfloat16 either way. `bf16` copies nothing: its
    checkpoint is `base.folder`, described by a manifest in `ws.checkpoints(base.name)`.
    """
    job = _planned_build(ws, base, scheme, recipe, calibration, name or scheme, dtype)
    if job.info.builder == "base":
        return _base_checkpoint(job)
    return _quantized_checkpoint(job, progress)


def find_checkpoint(
    ws: Workspace,
    base: LocalModel,
    scheme: str,
    recipe: Recipe,
    calibration: CalibrationSet | None,
    name: str,
    dtype: str,
) -> Checkpoint | None:
    """The checkpoint `build_checkpoint` would reuse for these inputs, or None when it would build
    one: what a run says up front it will reuse."""
    job = _planned_build(ws, base, scheme, recipe, calibration, name, dtype)
    if job.info.builder == "base":
        reused = _read_current(job.manifest)
        return reused.model_copy(update={"name": name}) if reused else None
    return job.reusable()


def _planned_build(
    ws: Workspace,
    base: LocalModel,
    scheme: str,
    recipe: Recipe,
    calibration: CalibrationSet | None,
    name: str,
    dtype: str,
) -> _Build:
    """The build these inputs ask for, keyed by them; the cheap checks first (no weights are read)."""
    info = scheme_info(scheme)
    if not isinstance(recipe, RECIPES[scheme]):
        raise UserError(
            f"recipe {type(recipe).__name__} is not a {scheme} recipe: use recipe_for({scheme!r})"
        )
    calib = calibration if info.needs_calibration else None
    if info.needs_calibration and calib is None:
        raise UserError(f"{scheme} needs a calibration set: pass --calibration (e.g. ko70)")
    check_recipe(base.folder, recipe, f"{name} of {base.name}")
    refuse_link(ws.checkpoints(base.name))  # before the base's weights are hashed into it
    versions = package_versions(AUTOAWQ_PACKAGES if info.builder == "autoawq" else PACKAGES)
    key = content_hash(
        {
            "model": base.name,
            "base": weights_digest(ws, base.name, base.folder),
            "scheme": scheme,
            "recipe": recipe.model_dump(mode="json"),
            "calibration": calib.sha256 if calib else None,
            # the builder's versions and dtype decide the output bytes; the base's do not
            "builder": None if info.builder == "base" else [versions[p] for p in sorted(versions)],
            "dtype": None if info.builder == "base" else dtype,
        }
    )
    return _Build(ws, base, info, recipe, calib, key, versions, name, dtype)


AUTOAWQ_UNSUPPORTED = {
    "gemma3_text": "autoawq 0.2.9 predates Gemma 3, and adapting its Gemma 2 recipe gave a broken model "
    "(gemma-3-270m held-out Korean perplexity 14.8 -> 13,220)",
}
"""model_type → why autoawq is refused for it (measured, not assumed)."""


def check_recipe(base_dir: Path, recipe: Recipe, what: str) -> None:
    """What can be checked before quantizing: autoawq is installed when the recipe needs it, and the
    group size suits the layers and every layer it leaves in 16 bits exists."""
    if scheme_info(recipe.scheme).builder == "autoawq":
        if importlib.util.find_spec("awq") is None:
            raise UserError(f"{what}: needs the optional autoawq package: {AUTOAWQ_INSTALL} (into .venv)")
        model_type = loads_json((base_dir / "config.json").read_text(encoding="utf-8")).get("model_type")
        if model_type in AUTOAWQ_UNSUPPORTED:
            raise UserError(f"{what}: {AUTOAWQ_UNSUPPORTED[model_type]}; use awq-w4a16 (llmcompressor)")
    tensors = layout.read_tensors(base_dir)  # safetensors headers only: cheap, before any calibration
    group_size = recipe.layer_group_size()
    if group_size is not None:
        layout.check_group_size(tensors, group_size, recipe.unquantized_modules(), what)
    layout.check_ignore(tensors, base_dir.name, recipe.unquantized_modules(), what)


def weight_bytes(directory: Path) -> int:
    """Bytes of the safetensors weights (what vLLM loads; tokenizer and configs left out)."""
    return sum(path.stat().st_size for path in layout.weight_files(directory))


def weights_digest(ws: Workspace, model: str, directory: Path) -> str:
    """sha256 over a model folder's config.json and safetensors files (cached per file by size and
    mtime, in `ws.checkpoints(model)`)."""
    if not (directory / "config.json").is_file():
        raise UserError(f"{directory} has no config.json: point at a model folder (or run make setup)")
    files = layout.weight_files(directory)
    cache_path = ws.checkpoints(model) / _DIGEST_CACHE
    cache = loads_json(cache_path.read_text(encoding="utf-8")) if cache_path.exists() else {}
    digest = hashlib.sha256()
    for path in [directory / "config.json", *files]:
        stat = path.stat()
        entry = cache.get(str(path.resolve()), {})
        if entry.get("size") != stat.st_size or entry.get("mtime_ns") != stat.st_mtime_ns:
            entry = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256_file(path)}
            cache[str(path.resolve())] = entry
        digest.update(f"{path.name}\0{entry['sha256']}\n".encode())
    write_atomic(cache_path, json.dumps(cache, indent=1, sort_keys=True) + "\n")
    return digest.hexdigest()


def layout_fields(directory: Path, base_dir: Path) -> dict[str, Any]:
    """The Checkpoint fields that describe where its bytes go (see `quantize.layout`)."""
    found = layout.weight_layout(directory, base_dir)
    return {
        "quantized_bytes": found.quantized_bytes,
        "unquantized_bytes": found.unquantized_bytes,
        "params": found.params,
        "effective_bits": found.effective_bits,
        "linear_bits": found.linear_bits,
    }


def _base_checkpoint(job: _Build) -> Checkpoint:
    reused = _read_current(job.manifest)
    if reused is not None:
        return reused.model_copy(update={"name": job.name})
    base = job.base
    record = Checkpoint(
        name=job.name,
        scheme=BASE_SCHEME,
        model=base.name,
        path=str(base.folder.resolve()),
        recipe=job.recipe.model_dump(mode="json"),
        calibration_hash=None,
        package_versions=job.versions,
        wall_s=0.0,
        peak_rss_bytes=0,
        disk_bytes=weight_bytes(base.folder),
        key=job.key,
        **layout_fields(base.folder, base.folder),
    )
    write_record(job.manifest, record)
    return record


def _read_current(path: Path) -> Checkpoint | None:
    """The record at `path` if it is one of this format; None if absent, unreadable or older."""
    if not path.is_file():
        return None
    try:
        record = read_record(path, Checkpoint)
    except ValueError:
        return None
    return record if record.version == SCHEMA_VERSION else None


def verify_output(directory: Path, info: SchemeInfo, base_dir: Path) -> str | None:
    """Why `directory` is not a usable `info` checkpoint of `base_dir`, or None when it is."""
    config_path = directory / "config.json"
    if not config_path.is_file():
        return "config.json missing"
    quant = loads_json(config_path.read_text(encoding="utf-8")).get("quantization_config")
    if info.checkpoint_format == "awq":
        if not isinstance(quant, dict) or quant.get("quant_method") != "awq":
            return "config.json has no awq quantization_config"
        if str(quant.get("version", "")).lower() != "gemm":
            return f"awq version {quant.get('version')!r}, expected 'gemm'"
    else:
        if not isinstance(quant, dict) or quant.get("quant_method") != "compressed-tensors":
            return "config.json has no compressed-tensors quantization_config"
        if quant.get("format") != info.checkpoint_format:
            return f"quantization format {quant.get('format')!r}, expected {info.checkpoint_format!r}"
    try:
        layout.read_tensors(directory)
    except UserError as exc:
        return str(exc)
    try:
        same_tokenizer = tokenizer_hash(directory) == tokenizer_hash(base_dir)
    except UserError:
        same_tokenizer = False
    return None if same_tokenizer else "tokenizer missing or different from the base's"


class _Build:
    """One build: its inputs, its key and where it goes (for bf16, only its manifest)."""

    def __init__(
        self,
        ws: Workspace,
        base: LocalModel,
        info: SchemeInfo,
        recipe: Recipe,
        calib: CalibrationSet | None,
        key: str,
        versions: dict[str, str],
        name: str,
        dtype: str,
    ) -> None:
        self.base, self.info, self.recipe, self.dtype = base, info, recipe, dtype
        self.calib, self.key, self.versions, self.name = calib, key, versions, name
        self.root = ws.checkpoints(base.name)
        self.manifest = self.root / f"bf16-{key}.json"  # bf16 copies nothing: a record of the base folder
        self.stem = f"{info.name}-{key}"
        self.final = self.root / self.stem
        self.log_path = self.root / f"{self.stem}.log"

    def reusable(self) -> Checkpoint | None:
        record = _read_current(self.final / CHECKPOINT_RECORD)
        if record is None or record.key != self.key:
            return None
        if verify_output(self.final, self.info, self.base.folder) is not None:
            return None
        return record.model_copy(update={"name": self.name})

    def delete_leftovers(self) -> None:
        """Under the lock, every `.tmp` of this key is a killed build's, and an unrecorded final too."""
        for stale in [*self.root.glob(f".{self.stem}*.tmp"), self.final]:
            if stale.exists():
                log.warning("%s: deleting unfinished or unverifiable %s", self.name, stale)
                shutil.rmtree(stale)


def _quantized_checkpoint(build: _Build, progress: Callable[[int, int], None] | None) -> Checkpoint:
    with build_lock(build.root / f"{build.stem}.lock", build.name):
        reused = build.reusable()
        if reused is not None:
            log.info("%s: reusing %s", build.name, build.final)
            return reused
        build.delete_leftovers()
        calib = build.calib
        if calib is not None and hashlib.sha256(Path(calib.path).read_bytes()).hexdigest() != calib.sha256:
            raise UserError(
                f"calibration file {calib.path} changed since it was built: delete it and rebuild"
            )
        tmp = build.root / f".{build.stem}.{secrets.token_hex(4)}.tmp"  # mkdir: the umask's mode
        tmp.mkdir()
        job = OneshotJob(
            base_dir=str(build.base.folder.resolve()),
            out_dir=str(tmp),
            scheme=build.info.name,
            recipe=build.recipe.model_dump(mode="json"),
            calibration_path=calib.path if calib else None,
            seq_len=calib.seq_len if calib else None,
            dtype=build.dtype,
        )
        if progress:
            progress(0, 1)
        log.info("%s: building in a child process (log: %s)", build.name, build.log_path)
        started = time.monotonic()
        status, peak_rss = run_child(_CHILD_MODULES[build.info.builder], job, build.log_path, progress)
        wall = time.monotonic() - started
        problem = failure(status, build.log_path) or verify_output(tmp, build.info, build.base.folder)
        if problem:
            shutil.rmtree(tmp, ignore_errors=True)
            what = f"{build.name} build of {build.base.name}"
            raise UserError(f"{what} failed: {problem}; log: {build.log_path}")
        os.replace(tmp, build.final)
        record = Checkpoint(
            name=build.name,
            scheme=build.info.name,
            model=build.base.name,
            path=str(build.final),
            recipe=build.recipe.model_dump(mode="json"),
            calibration_hash=calib.sha256 if calib else None,
            package_versions=build.versions,
            wall_s=round(wall, 2),
            peak_rss_bytes=peak_rss,
            disk_bytes=weight_bytes(build.final),
            key=build.key,
            build_dtype=build.dtype,
            **layout_fields(build.final, build.base.folder),
        )
        write_record(build.final / CHECKPOINT_RECORD, record)
    timings = loads_json((build.final / REPORT_NAME).read_text(encoding="utf-8"))
    log.info("%s built in %.1f s, peak RSS %.2f GiB: %s", build.name, wall, peak_rss / 2**30, timings)
    if progress:
        progress(1, 1)
    return record
