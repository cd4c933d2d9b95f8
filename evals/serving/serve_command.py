"""The `vllm serve` command line and environment of one checkpoint under a serve profile (pure).

Everything a server is started with comes from here, so that every checkpoint gets the same settings
from its profile and nothing inherited from the caller's environment overrides them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from evals.serving import cpu
from evals.serving.ports import HOST
from kqe.core.records import ServeProfile
from kqe.core.workspace import Workspace

_GiB = 1024**3


def vllm_command(
    vllm_bin: Path,
    model_dir: Path,
    served_name: str,
    profile: ServeProfile,
    port: int,
    on_gpu: bool,
    trust_remote_code: bool = False,
) -> list[str]:
    """The `vllm serve` argv for one checkpoint. Holds no secret: the API key travels in the env.

    The server listens on loopback only, reads safetensors weights only (never pickled .bin/.pt),
    and runs a checkpoint's own Python code only when `trust_remote_code` is set.
    """
    if profile.dtype == cpu.NATIVE_DTYPE:
        raise ValueError(f"profile {profile.name} is not made concrete for a device (hardware.for_device)")
    command = [
        str(vllm_bin), "serve", str(model_dir),
        "--host", HOST,
        "--port", str(port),
        "--load-format", "safetensors",
        "--served-model-name", served_name,
        "--max-model-len", str(profile.max_model_len),
        "--max-num-seqs", str(profile.max_num_seqs),
        "--dtype", profile.dtype,
        "--max-logprobs", str(profile.max_logprobs),
        # the scorer relies on log-probs over the full vocabulary before any logits processor
        "--logprobs-mode", "raw_logprobs",
        # a checkpoint's generation_config.json must not change sampling defaults between checkpoints
        "--generation-config", "vllm",
        "--enable-prefix-caching" if profile.enable_prefix_caching else "--no-enable-prefix-caching",
        "--enable-chunked-prefill" if profile.enable_chunked_prefill else "--no-enable-chunked-prefill",
        # one access-log line per scoring request would bury the memory lines
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
    if trust_remote_code:
        command.append("--trust-remote-code")
    if profile.enforce_eager:
        command.append("--enforce-eager")
    if profile.tensor_parallel_size != 1:
        command += ["--tensor-parallel-size", str(profile.tensor_parallel_size)]
    if profile.kv_cache_dtype != "auto":
        command += ["--kv-cache-dtype", profile.kv_cache_dtype]
    if on_gpu:
        command += ["--gpu-memory-utilization", str(profile.gpu_memory_utilization)]
        if profile.gpu_kv_cache_gib is not None:
            command += ["--kv-cache-memory-bytes", str(round(profile.gpu_kv_cache_gib * _GiB))]
        if profile.cpu_offload_gib:
            command += ["--cpu-offload-gb", f"{profile.cpu_offload_gib:g}"]
    else:
        # VLLM_CPU_KVCACHE_SPACE only takes whole GiB (vLLM 0.32 parses it with int()); bytes are exact
        command += ["--kv-cache-memory-bytes", str(round(profile.cpu_kv_cache_gib * _GiB))]
    return command


# Inherited variables that would silently override the profile or the key.
_DROPPED_ENV = (
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_API_KEY",
    "VLLM_HOST_IP",
    "VLLM_PORT",
    "VLLM_ENABLE_V1_MULTIPROCESSING",
)


def engine_env(profile: ServeProfile, ws: Workspace, on_gpu: bool, api_key: str) -> dict[str, str]:
    """Variables set for the server on top of the inherited environment."""
    env = {
        "VLLM_API_KEY": api_key,
        "VLLM_CACHE_ROOT": str(ws.vllm_cache()),
        # offline by design: a local checkpoint directory, no usage reports, no hub look-ups
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
    }
    if not on_gpu:
        # vllm-cpu needs it to pick the CPU platform once `vllm` reports version `<ver>+cpu`
        env["VLLM_TARGET_DEVICE"] = "cpu"
        # AMX state asked for up front, every core computing on 1–2 cores; under KQE_CPU_ISA the engine
        # behaves as on that CPU kind
        env |= cpu.cpu_engine_env(os.environ.get("PYTHONPATH"), cpu.cpu_kernels(ws.serve_venv))
        if profile.cpu_worker_in_engine:
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    return env


def server_environment(
    inherited: Mapping[str, str], profile: ServeProfile, ws: Workspace, on_gpu: bool, api_key: str
) -> dict[str, str]:
    """The server's whole environment: the inherited one less `_DROPPED_ENV`, plus `engine_env`."""
    env = {key: value for key, value in inherited.items() if key not in _DROPPED_ENV}
    return env | engine_env(profile, ws, on_gpu, api_key)
