"""A capacity measurement end to end: the workload written, the checkpoint served under its profile
(or a running server on this machine), `vllm bench serve` at each level; and the guide's A/Bs, the
same checkpoint served twice with one option flipped."""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from evals.capacity.bench import BenchSettings, BenchTarget, measure_capacity
from evals.capacity.workloads import prompt_budget, prompt_source
from evals.serving import hardware
from evals.serving.endpoint import Endpoint
from evals.serving.serve import VllmServer, check_serve_env, engine_version
from kqe.core.capacity import GUIDE_CLAIMS, AbOption, AbReport, CapacityReport, Slo, Workload
from kqe.core.errors import UserError
from kqe.core.io import loads_json
from kqe.core.records import MemoryReport, ServeProfile
from kqe.core.workspace import Workspace


@dataclass(frozen=True)
class WorkloadSpec:
    """Which Korean workload to send and how long its requests are."""

    workload: Workload
    texts: Mapping[str, str]
    """The Korean source documents the passages are cut from."""
    rag_prompt_tokens: int = 1500
    max_tokens: int = 64


def local_base_url(url: str) -> str:
    """The server root of `url` (a trailing `/v1` dropped); UserError unless it is on this machine."""
    parsed = urllib.parse.urlsplit(url.strip())
    host = parsed.hostname or ""
    if parsed.scheme not in ("http", "https") or not host:
        raise UserError(f"--url {url!r}: give a server root such as http://127.0.0.1:8000")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise UserError(f"--url {url!r}: load tests may only target this machine (127.0.0.1 or localhost)")
    path = parsed.path.rstrip("/").removesuffix("/v1")
    return urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, path, "", ""))


def served_model(endpoint: Endpoint) -> tuple[str, int]:
    """The served name and its max-model-len; UserError when the server is not there or not usable."""
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    try:
        response = httpx.get(f"{endpoint.base_url}/v1/models", headers=headers, timeout=10, trust_env=False)
    except httpx.HTTPError as error:
        raise UserError(
            f"cannot reach {endpoint.base_url} ({type(error).__name__}): start the server or fix --url"
        ) from None
    if response.status_code == 401:
        raise UserError(f"{endpoint.base_url} refused the API key: pass the server's key with --api-key")
    if response.status_code != 200:
        raise UserError(f"{endpoint.base_url}/v1/models answered HTTP {response.status_code}: is it vLLM?")
    models = _listed_models(response, endpoint.base_url)
    name = endpoint.served_name or (next(iter(models)) if len(models) == 1 else None)
    if name is None or name not in models:
        raise UserError(f"{endpoint.base_url} serves {sorted(models)}: pass one of them with --served-name")
    return name, models[name]


def _listed_models(response: httpx.Response, base_url: str) -> dict[str, int]:
    """Model id → max-model-len from an OpenAI `/v1/models` answer; UserError for anything else (an
    HTML page, a proxy's error text, JSON of another shape)."""
    try:
        listed = loads_json(response.text)["data"]
        return {str(model["id"]): int(model.get("max_model_len") or 0) for model in listed}
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
        raise UserError(
            f"{base_url}/v1/models answered no OpenAI model list ({response.text[:40]!r}): is it vLLM?"
        ) from None


def _measure(
    ws: Workspace,
    endpoint: Endpoint,
    tokenizer_dir: Path,
    spec: WorkloadSpec,
    max_model_len: int,
    settings: BenchSettings,
    slo: Slo,
    profile: ServeProfile | None,
    progress: Callable[[int, int], None] | None,
) -> CapacityReport:
    prompt_tokens = prompt_budget(spec.workload, max_model_len, spec.max_tokens, spec.rag_prompt_tokens)
    on_gpu = hardware.local_device(ws.serve_venv).engine == "gpu"
    target = BenchTarget(endpoint, check_serve_env(ws), on_gpu)
    source = prompt_source(
        tokenizer_dir, spec.texts, spec.workload, prompt_tokens, spec.max_tokens, settings.seed
    )
    return measure_capacity(target, source, settings, slo, profile, engine_version(ws), progress)


def measure_running(
    ws: Workspace,
    endpoint: Endpoint,
    tokenizer_dir: Path,
    spec: WorkloadSpec,
    settings: BenchSettings,
    slo: Slo,
) -> CapacityReport:
    """Capacity of a server already running on this machine (`--url`)."""
    name, max_model_len = served_model(endpoint)
    endpoint = Endpoint(endpoint.base_url, endpoint.api_key, name)
    return _measure(ws, endpoint, tokenizer_dir, spec, max_model_len, settings, slo, None, None)


def measure_server(
    ws: Workspace,
    server: VllmServer,
    spec: WorkloadSpec,
    settings: BenchSettings,
    slo: Slo,
    progress: Callable[[int, int], None] | None = None,
) -> CapacityReport:
    """Capacity of a server the suite started, under its profile."""
    profile = server.profile
    return _measure(
        ws, server.endpoint, server.model_dir, spec, profile.max_model_len, settings, slo, profile, progress
    )


def flipped(profile: ServeProfile, option: AbOption) -> ServeProfile:
    """`profile` with `option` switched (the A/B's other arm); everything else identical."""
    field = "enable_prefix_caching" if option == "prefix-caching" else "enforce_eager"
    return profile.model_copy(update={field: not getattr(profile, field)})


def measure_ab(
    ws: Workspace,
    model_dir: Path,
    served_name: str,
    profile: ServeProfile,
    option: AbOption,
    spec: WorkloadSpec,
    settings: BenchSettings,
    slo: Slo,
    log_dir: Path,
) -> AbReport:
    """Serve the checkpoint with `option` on, then off, and measure both the same way."""
    field = "enable_prefix_caching" if option == "prefix-caching" else "enforce_eager"
    arms: dict[bool, CapacityReport] = {}
    memory: dict[bool, MemoryReport] = {}
    for arm in (profile, flipped(profile, option)):
        state = bool(getattr(arm, field))
        log_path = log_dir / f"load.{served_name}.{arm.name}.{option}-{'on' if state else 'off'}.log"
        with VllmServer(model_dir, served_name, arm, ws, log_path) as server:
            memory[state] = server.memory()
            arms[state] = measure_server(ws, server, spec, settings, slo)
    return AbReport(
        option=option,
        guide_claim=GUIDE_CLAIMS[option],
        on=arms[True],
        off=arms[False],
        on_memory=memory[True],
        off_memory=memory[False],
    )
