"""Checkpoint builds: the bf16 base as is, quantized schemes through llmcompressor in a child process.

A built checkpoint lives in `ws.checkpoints(model)/<scheme>-<key>/` with its `checkpoint.json`; the
child writes into a hidden `.tmp` folder that is renamed only after the output has been verified, so
a folder with that name is complete. A leftover `.tmp` folder (a killed build) is deleted, never used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kqe.errors import UserError
from kqe.io import read_record, sha256_file, write_atomic, write_record
from kqe.records import CalibrationSet, Checkpoint, content_hash, package_versions
from kqe.workspace import Workspace
from quantize._oneshot import REPORT_NAME, OneshotJob
from quantize.calibration import tokenizer_hash
from quantize.schemes import Recipe, SchemeInfo, scheme_info

log = logging.getLogger(__name__)

CHECKPOINT_RECORD = "checkpoint.json"
PACKAGES = ("llmcompressor", "compressed-tensors", "transformers", "torch")
_REPO = Path(__file__).resolve().parents[1]
_DIGEST_CACHE = ".base-digests.json"
"""Per-file sha256 of base weights, keyed by path, size and mtime: big models are hashed once."""


def build_checkpoint(
    ws: Workspace,
    model: str,
    base_dir: Path,
    scheme: str,
    recipe: Recipe,
    calibration: CalibrationSet | None,
    progress: Callable[[int, int], None] | None = None,
) -> Checkpoint:
    """Build (or reuse) the `scheme` checkpoint of `model` from the bf16 weights in `base_dir`.

    `calibration` is used only by schemes that need it. `bf16` copies nothing: its checkpoint is
    `base_dir`, described by a manifest in `ws.checkpoints(model)`.
    """
    info = scheme_info(scheme)
    if not isinstance(recipe, info.recipe_type):
        raise UserError(
            f"recipe {type(recipe).__name__} is not a {scheme} recipe: use recipe_for({scheme!r})"
        )
    calib = calibration if info.needs_calibration else None
    if info.needs_calibration and calib is None:
        raise UserError(f"{scheme} needs a calibration set: pass --calibration (e.g. ko70)")
    versions = package_versions(PACKAGES)
    key = content_hash(
        {
            "model": model,
            "base": base_digest(ws, model, base_dir),
            "scheme": scheme,
            "recipe": recipe.model_dump(mode="json"),
            "calibration": calib.sha256 if calib else None,
            # the builder's versions decide the output bytes; the base is the same whatever they are
            "builder": [versions["llmcompressor"], versions["compressed-tensors"]]
            if info.checkpoint_format
            else None,
        }
    )
    if info.checkpoint_format is None:
        return _base_checkpoint(ws, model, base_dir, recipe, key, versions)
    return _quantized_checkpoint(ws, model, base_dir, info, recipe, calib, key, versions, progress)


def weight_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.safetensors"))


def weight_bytes(directory: Path) -> int:
    """Bytes of the safetensors weights (what vLLM loads; tokenizer and configs left out)."""
    return sum(path.stat().st_size for path in weight_files(directory))


def base_digest(ws: Workspace, model: str, base_dir: Path) -> str:
    """sha256 over the base's config.json and safetensors files (cached per file by size and mtime)."""
    files = weight_files(base_dir)
    if not files or not (base_dir / "config.json").is_file():
        raise UserError(
            f"{base_dir} has no config.json + *.safetensors: install the model first (make setup)"
        )
    cache_path = ws.checkpoints(model) / _DIGEST_CACHE
    cache = json.loads(cache_path.read_text(encoding="utf-8")) if cache_path.exists() else {}
    digest = hashlib.sha256()
    for path in [base_dir / "config.json", *files]:
        stat = path.stat()
        entry = cache.get(str(path.resolve()), {})
        if entry.get("size") != stat.st_size or entry.get("mtime_ns") != stat.st_mtime_ns:
            entry = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256_file(path)}
            cache[str(path.resolve())] = entry
        digest.update(f"{path.name}\0{entry['sha256']}\n".encode())
    write_atomic(cache_path, json.dumps(cache, indent=1, sort_keys=True) + "\n")
    return digest.hexdigest()


def _base_checkpoint(
    ws: Workspace, model: str, base_dir: Path, recipe: Recipe, key: str, versions: dict[str, str]
) -> Checkpoint:
    manifest = ws.checkpoints(model) / f"bf16-{key}.json"
    if manifest.exists():
        return read_record(manifest, Checkpoint)
    record = Checkpoint(
        name="bf16",
        scheme="bf16",
        model=model,
        path=str(base_dir.resolve()),
        recipe=recipe.model_dump(mode="json"),
        calibration_hash=None,
        package_versions=versions,
        wall_s=0.0,
        peak_rss_bytes=0,
        disk_bytes=weight_bytes(base_dir),
        key=key,
    )
    write_record(manifest, record)
    return record


def verify_output(directory: Path, info: SchemeInfo, base_dir: Path) -> str | None:
    """Why `directory` is not a usable `info` checkpoint of `base_dir`, or None when it is."""
    config_path = directory / "config.json"
    if not config_path.is_file():
        return "config.json missing"
    quant = json.loads(config_path.read_text(encoding="utf-8")).get("quantization_config")
    if not isinstance(quant, dict) or quant.get("quant_method") != "compressed-tensors":
        return "config.json has no compressed-tensors quantization_config"
    if quant.get("format") != info.checkpoint_format:
        return f"quantization format {quant.get('format')!r}, expected {info.checkpoint_format!r}"
    if not weight_files(directory):
        return "no *.safetensors weights"
    try:
        same_tokenizer = tokenizer_hash(directory) == tokenizer_hash(base_dir)
    except UserError:
        same_tokenizer = False
    return None if same_tokenizer else "tokenizer missing or different from the base's"


def _reusable(final: Path, key: str, info: SchemeInfo, base_dir: Path) -> Checkpoint | None:
    record_path = final / CHECKPOINT_RECORD
    if not record_path.is_file():
        return None
    try:
        record = read_record(record_path, Checkpoint)
    except ValueError:
        return None
    if record.key != key or verify_output(final, info, base_dir) is not None:
        return None
    return record


def _quantized_checkpoint(
    ws: Workspace,
    model: str,
    base_dir: Path,
    info: SchemeInfo,
    recipe: Recipe,
    calib: CalibrationSet | None,
    key: str,
    versions: dict[str, str],
    progress: Callable[[int, int], None] | None,
) -> Checkpoint:
    root = ws.checkpoints(model)
    final, tmp = root / f"{info.name}-{key}", root / f".{info.name}-{key}.tmp"
    reused = _reusable(final, key, info, base_dir)
    if reused is not None:
        log.info("%s: reusing %s", info.name, final)
        return reused
    for stale in (tmp, final):
        if stale.exists():
            log.warning("%s: deleting unfinished or unverifiable %s", info.name, stale)
            shutil.rmtree(stale)
    if calib is not None and hashlib.sha256(Path(calib.path).read_bytes()).hexdigest() != calib.sha256:
        raise UserError(f"calibration file {calib.path} changed since it was built: delete it and rebuild")
    tmp.mkdir(parents=True)
    job = OneshotJob(
        base_dir=str(base_dir.resolve()),
        out_dir=str(tmp),
        scheme=info.name,
        recipe=recipe.model_dump(mode="json"),
        calibration_path=calib.path if calib else None,
        seq_len=calib.seq_len if calib else None,
    )
    log_path = root / f"{info.name}-{key}.log"
    if progress:
        progress(0, 1)
    started = time.monotonic()
    status, peak_rss = _run_child(job, log_path)
    wall = time.monotonic() - started
    problem = _failure(status, log_path) or verify_output(tmp, info, base_dir)
    if problem:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"{info.name} build of {model} failed: {problem}; log: {log_path}")
    os.replace(tmp, final)
    record = Checkpoint(
        name=info.name,
        scheme=info.name,
        model=model,
        path=str(final),
        recipe=recipe.model_dump(mode="json"),
        calibration_hash=calib.sha256 if calib else None,
        package_versions=versions,
        wall_s=round(wall, 2),
        peak_rss_bytes=peak_rss,
        disk_bytes=weight_bytes(final),
        key=key,
    )
    write_record(final / CHECKPOINT_RECORD, record)
    timings = json.loads((final / REPORT_NAME).read_text(encoding="utf-8"))
    log.info("%s built in %.1f s, peak RSS %.2f GiB: %s", info.name, wall, peak_rss / 2**30, timings)
    if progress:
        progress(1, 1)
    return record


def _run_child(job: OneshotJob, log_path: Path) -> tuple[int, int]:
    """Run the oneshot child to completion; return its wait status and its own peak RSS in bytes."""
    command = [sys.executable, "-m", "quantize._oneshot", job.model_dump_json()]
    with log_path.open("w", encoding="utf-8") as log_file:
        # Progress bars would fill the log with carriage-return frames; the log is read, not watched.
        env = {**os.environ, "TQDM_DISABLE": "1", "TOKENIZERS_PARALLELISM": "false"}
        child = subprocess.Popen(
            command, cwd=_REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            # wait4 gives this child's own rusage; RUSAGE_CHILDREN would mix in every earlier child.
            _, status, usage = os.wait4(child.pid, 0)
        except BaseException:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            raise
        child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_maxrss * 1024


def _failure(returncode: int, log_path: Path) -> str | None:
    if returncode == 0:
        return None
    if returncode < 0:
        name = signal.Signals(-returncode).name
        return f"killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    lines = [line.strip() for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines()]
    errors = [line for line in lines if "Error" in line or "Exception" in line]
    last = (errors or [line for line in lines if line] or ["no output"])[-1]
    return f"exit {returncode}: {last[:300]}"
