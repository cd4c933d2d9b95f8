"""Serving checkpoints: profiles, the `vllm serve` command, and a real server's whole life."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from evals.serving.cpu import CpuKernels
from evals.serving.hardware import Device, for_device
from evals.serving.serve import (
    SERVER_GUARD,
    STOP_GRACE_S,
    ServeError,
    VllmServer,
    load_profile,
    local_profile,
    profile_names,
)
from evals.serving.serve_command import engine_env, server_environment, vllm_command
from evals.serving.server_guard import GRACE_S
from evals.serving.stale_server import kill_stale_server
from evals.serving.vllm_log import telling_line
from kqe.core.errors import UserError
from kqe.core.processes import group_members
from kqe.core.records import content_hash
from kqe.core.workspace import Workspace
from tests.helpers.repo import REPO
from tests.helpers.serve_env import needs_serve_env

LOGS = Path(__file__).parent / "data" / "vllm_logs"
VLLM_BIN = REPO / ".venv-serve" / "bin" / "vllm"
GiB = 1024**3
CPU_CI = for_device(load_profile("cpu-ci"), Device("cpu", cpu_kernels=CpuKernels("_C", w4a16=True)))
"""cpu-ci made concrete as on a CPU with AVX-512 BF16 (bfloat16), for the command-line checks."""


def flag_value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def live_group_members(pgid: int) -> list[str]:
    """Processes of the group that are not zombies, as `ps` lists them."""
    ps = subprocess.run(["ps", "-eo", "pgid=,stat=,pid=,args="], capture_output=True, text=True, check=True)
    rows = [line.split(None, 3) for line in ps.stdout.splitlines()]
    return [" ".join(row) for row in rows if int(row[0]) == pgid and not row[1].startswith("Z")]


def wait_until_gone(pgid: int, timeout_s: float) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := live_group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


# --- profiles -----------------------------------------------------------------------------------


def test_every_profile_loads_and_the_guide_profiles_exist() -> None:
    names = profile_names()
    assert {"cpu-small", "cpu-ci", "rtx4090-16k", "shared-gpu", "a100-40g", "h100-80g"} <= set(names)
    profiles = [load_profile(name) for name in names]
    assert [profile.name for profile in profiles] == names
    assert len({profile.key for profile in profiles}) == len(names)

    small = load_profile("cpu-small")
    assert (small.max_model_len, small.max_num_seqs, small.cpu_kv_cache_gib) == (2048, 8, 1.0)
    assert small.enable_prefix_caching and small.enable_chunked_prefill and small.dtype == "native"
    rtx = load_profile("rtx4090-16k")
    assert (rtx.gpu_memory_utilization, rtx.max_model_len, rtx.max_num_seqs) == (0.92, 16384, 24)
    assert load_profile("shared-gpu").gpu_memory_utilization <= 0.80
    assert load_profile("cpu-ci").cpu_kv_cache_gib < small.cpu_kv_cache_gib


def test_unknown_profile_lists_the_known_names() -> None:
    with pytest.raises(UserError, match="unknown serve profile 'rtx5090'") as caught:
        load_profile("rtx5090")
    assert "cpu-small" in str(caught.value) and "\n" not in str(caught.value)


def test_a_misspelt_profile_field_is_a_one_line_user_error(tmp_path: Path) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text("[mine]\nmax_model_len = 1024\nmax_num_seq = 4\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"\[mine\]") as caught:
        load_profile("mine", path)
    assert "\n" not in str(caught.value)


# --- command and environment ----------------------------------------------------------------------


def test_cpu_command_carries_the_profile_and_no_secret(workspace: Workspace) -> None:
    profile = CPU_CI
    command = vllm_command(VLLM_BIN, Path("/models/x"), "awq-w4a16", profile, 8123, on_gpu=False)

    assert command[:3] == [str(VLLM_BIN), "serve", "/models/x"]
    assert flag_value(command, "--host") == "127.0.0.1"
    assert flag_value(command, "--port") == "8123"
    assert flag_value(command, "--served-model-name") == "awq-w4a16"
    assert flag_value(command, "--max-model-len") == str(profile.max_model_len)
    assert flag_value(command, "--max-num-seqs") == str(profile.max_num_seqs)
    assert flag_value(command, "--dtype") == "bfloat16"
    assert flag_value(command, "--max-logprobs") == "20"
    assert flag_value(command, "--logprobs-mode") == "raw_logprobs"
    assert int(flag_value(command, "--kv-cache-memory-bytes")) == GiB // 4
    assert {"--enable-prefix-caching", "--enable-chunked-prefill", "--enforce-eager"} <= set(command)
    assert "--gpu-memory-utilization" not in command
    assert flag_value(command, "--load-format") == "safetensors"  # never unpickle .bin/.pt weights
    assert not any("trust-remote-code" in part or "api-key" in part for part in command)

    env = engine_env(profile, workspace, on_gpu=False, api_key="k3y")
    assert env["VLLM_API_KEY"] == "k3y" and "k3y" not in command
    assert env["VLLM_TARGET_DEVICE"] == "cpu"
    assert env["VLLM_CACHE_ROOT"] == str(workspace.vllm_cache())
    assert "VLLM_CPU_KVCACHE_SPACE" not in env  # integer GiB only in vLLM 0.32: the flag carries bytes


def test_server_listens_on_loopback_with_a_fresh_key_and_trusts_no_code_unless_asked(
    workspace: Workspace,
) -> None:
    profile = CPU_CI
    servers = [VllmServer(Path("/m"), "m", profile, workspace, Path(f"/logs/{i}.log")) for i in range(3)]
    keys = {server.api_key for server in servers}
    assert len(keys) == 3 and all(len(key) >= 32 for key in keys)  # 24 random bytes, url-safe base64
    for on_gpu in (False, True):
        command = vllm_command(VLLM_BIN, Path("/m"), "m", profile, 1, on_gpu)
        assert flag_value(command, "--host") == "127.0.0.1" and "0.0.0.0" not in command
        assert "--trust-remote-code" not in command
        trusting = vllm_command(VLLM_BIN, Path("/m"), "m", profile, 1, on_gpu, trust_remote_code=True)
        assert "--trust-remote-code" in trusting
    assert VllmServer(Path("/m"), "m", profile, workspace, Path("/l.log")).trust_remote_code is False


def test_the_worker_runs_in_the_engine_process_only_where_the_profile_says(workspace: Workspace) -> None:
    variable = "VLLM_ENABLE_V1_MULTIPROCESSING"
    inherited = {variable: "0", "PATH": "/bin"}  # an inherited value never decides it
    small = for_device(load_profile("cpu-small"), Device("cpu", cpu_kernels=CpuKernels("_C", w4a16=True)))
    assert not small.cpu_worker_in_engine and CPU_CI.cpu_worker_in_engine
    assert variable not in server_environment(inherited, small, workspace, False, "k")
    assert server_environment(inherited, CPU_CI, workspace, False, "k")[variable] == "0"
    gpu = load_profile("h100-80g").model_copy(update={"cpu_worker_in_engine": True})
    assert variable not in engine_env(gpu, workspace, on_gpu=True, api_key="k")
    # the setting keys only the profiles that set it: scores made under the others stay reusable
    before = small.model_dump(
        exclude={"version", "cpu_offload_gib", "cpu_worker_in_engine", "gpu", "default_for_gpu"}
    )
    assert small.key == content_hash(before)
    assert small.model_copy(update={"cpu_worker_in_engine": True}).key != small.key


def test_gpu_command_uses_memory_utilization(workspace: Workspace) -> None:
    profile = load_profile("rtx4090-16k").model_copy(
        update={"enable_prefix_caching": False, "enable_chunked_prefill": False}
    )
    command = vllm_command(VLLM_BIN, Path("/m"), "fp8", profile, 9000, on_gpu=True)

    assert flag_value(command, "--gpu-memory-utilization") == "0.92"
    assert flag_value(command, "--max-model-len") == "16384"
    assert {"--no-enable-prefix-caching", "--no-enable-chunked-prefill"} <= set(command)
    assert "--kv-cache-memory-bytes" not in command and "--enforce-eager" not in command
    assert "VLLM_TARGET_DEVICE" not in engine_env(profile, workspace, on_gpu=True, api_key="k")


@pytest.mark.slow
@needs_serve_env
def test_every_flag_we_pass_exists_in_the_installed_vllm() -> None:
    help_text = subprocess.run(
        [str(VLLM_BIN), "serve", "--help=all"],
        capture_output=True,
        text=True,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
        timeout=300,
        check=True,
    ).stdout
    profile = CPU_CI.model_copy(update={"cpu_offload_gib": 2.0})  # placement's fallback
    flags = {
        part
        for on_gpu in (False, True)
        for part in vllm_command(VLLM_BIN, Path("/m"), "m", profile, 1, on_gpu, trust_remote_code=True)
        if part.startswith("--")
    }
    flags |= {"--no-enable-prefix-caching", "--no-enable-chunked-prefill"}
    assert [flag for flag in sorted(flags) if flag not in help_text] == []


# --- failures before and after launch ---------------------------------------------------------------


def test_telling_line_picks_the_cause_from_real_failure_logs() -> None:
    arch = telling_line((LOGS / "cpu_fail_unknown_architecture.log").read_text(encoding="utf-8"))
    assert arch is not None and "NotARealModelForCausalLM" in arch and len(arch) <= 300
    kv = telling_line((LOGS / "cpu_fail_kv_cache_too_big.log").read_text(encoding="utf-8"))
    assert kv is not None and "less than requested memory for kv" in kv
    assert telling_line((LOGS / "cpu_tiny_llama_cpu-small.log").read_text(encoding="utf-8")) is None


def test_missing_serve_environment_says_run_make_setup(tmp_path: Path) -> None:
    ws = Workspace(root=tmp_path, cache=tmp_path / "cache", serve_venv=tmp_path / "no-venv")
    server = VllmServer(tmp_path, "bf16", local_profile("cpu-ci", ws), ws, tmp_path / "serve.log")
    with pytest.raises(UserError, match=r"serve environment missing at .*run `make setup`"), server:
        pass


@needs_serve_env
def test_a_taken_forced_port_is_a_user_error(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text("{}")  # the port is checked before vLLM would read it
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setenv("KQE_PORT", str(taken.getsockname()[1]))
        server = VllmServer(
            tmp_path, "bf16", local_profile("cpu-ci", workspace), workspace, tmp_path / "s.log"
        )
        with pytest.raises(UserError, match=r"KQE_PORT=\d+ is not free") as caught, server:
            pass
    assert "\n" not in str(caught.value) and not server.alive()


def test_kill_stale_server_kills_a_vllm_group_but_never_another_process(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin" / "vllm"  # what `ps` shows of a server: a program called vllm
    fake_bin.parent.mkdir()
    fake_bin.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n", encoding="utf-8")
    fake_bin.chmod(0o755)
    stale = subprocess.Popen([str(fake_bin), "serve"], start_new_session=True)
    other = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        pidfile = tmp_path / "serve.pid"
        pidfile.write_text(f"{other.pid}\n", encoding="utf-8")
        assert kill_stale_server(pidfile, STOP_GRACE_S) is False
        assert other.poll() is None and not pidfile.exists()

        pidfile.write_text(f"{stale.pid}\n", encoding="utf-8")
        assert kill_stale_server(pidfile, STOP_GRACE_S) is True
        assert stale.wait(timeout=10) == -signal.SIGTERM
        assert group_members(stale.pid) == [] and not pidfile.exists()
    finally:
        for process in (stale, other):
            process.kill()
            process.wait()


# --- a real server -----------------------------------------------------------------------------------


def post_json(url: str, body: dict, api_key: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with no_proxy.open(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, {}


def hf_next_token_logprobs(model_dir: Path, prompt_ids: list[int]) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids])).logits[0, -1].float()
    return torch.log_softmax(logits, dim=-1).tolist()


@pytest.mark.slow
@needs_serve_env
def test_serves_scores_reports_memory_and_leaves_no_process(
    tiny_model_dir: Path, workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoTokenizer

    import evals.serving.serve

    # the profile, not the caller's environment, sizes the KV cache
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    # lose the race for the first free port: vLLM fails to bind it and the server retries once
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    ports = iter([blocker.getsockname()[1]])
    real_free_port = evals.serving.serve.free_port
    monkeypatch.setattr(evals.serving.serve, "free_port", lambda: next(ports, None) or real_free_port())

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    letters = [tokenizer.encode(f" {letter}", add_special_tokens=False)[0] for letter in "ABCD"]
    prompt = tokenizer.encode("Question: 대한민국의 주권은 누구에게 있는가? Answer:")
    profile = local_profile("cpu-ci", workspace)
    body = {
        "model": "bf16",
        "prompt": prompt,
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": len(letters),
        "logprob_token_ids": letters,
        "return_tokens_as_token_ids": True,
    }

    with VllmServer(tiny_model_dir, "bf16", profile, workspace, tmp_path / "logs" / "bf16.log") as server:
        pgid = server.pid
        assert pgid is not None and int(server.pidfile.read_text()) == pgid
        assert server.alive() and live_group_members(pgid)
        status, reply = post_json(f"{server.base_url}/v1/completions", body, server.api_key)
        assert status == 200
        assert post_json(f"{server.base_url}/v1/completions", body, None)[0] == 401
        memory = server.memory()

    blocker.close()
    assert wait_until_gone(pgid, 5) == [] and not server.alive() and not server.pidfile.exists()
    assert server.log_path.read_text().count("Address already in use") == 1
    top = reply["choices"][0]["logprobs"]["top_logprobs"][0]
    # the four letters plus the sampled token (when it is not a letter), keyed "token_id:N"
    assert {f"token_id:{token}" for token in letters} <= set(top) and len(top) <= 5
    expected = hf_next_token_logprobs(tiny_model_dir, prompt)
    for token in letters:  # full-vocabulary log-probs, as transformers computes them (bf16 noise)
        assert top[f"token_id:{token}"] == pytest.approx(expected[token], abs=0.05)
    assert memory.device == "cpu" and memory.kv_cache_gib == profile.cpu_kv_cache_gib
    assert memory.kv_cache_tokens is not None and memory.kv_cache_tokens > 0
    assert memory.max_concurrency is not None and memory.max_concurrency > 0
    assert memory.max_model_len == profile.max_model_len
    assert math.isclose(memory.kv_cache_tokens, memory.max_concurrency * profile.max_model_len, rel_tol=1e-3)


@pytest.mark.slow
@needs_serve_env
def test_an_unloadable_checkpoint_is_a_one_line_serve_error(
    tiny_model_dir: Path, workspace: Workspace, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    config = json.loads((tiny_model_dir / "config.json").read_text())
    config["architectures"] = ["NotARealModelForCausalLM"]
    (broken / "config.json").write_text(json.dumps(config))
    log_path = tmp_path / "broken.log"

    server = VllmServer(
        broken, "broken", local_profile("cpu-ci", workspace), workspace, log_path, start_timeout_s=300
    )
    with pytest.raises(ServeError) as caught, server:
        pass

    message = str(caught.value)
    assert "\n" not in message
    assert "broken" in message and "NotARealModelForCausalLM" in message and str(log_path) in message
    assert server.pid is not None and live_group_members(server.pid) == []
    assert not server.alive() and not server.pidfile.exists()


CHILD = """
import sys, time
from pathlib import Path
from evals.serving.serve import VllmServer, local_profile
from kqe.core.workspace import Workspace
ws = Workspace(root=Path(sys.argv[2]), cache=Path(sys.argv[3]), serve_venv=Path(sys.argv[4]))
with VllmServer(Path(sys.argv[1]), "bf16", local_profile("cpu-ci", ws), ws, Path(sys.argv[5])) as server:
    print(server.pidfile.read_text().strip(), flush=True)
    time.sleep(600)
"""


@pytest.mark.slow
@needs_serve_env
@pytest.mark.parametrize("parent_signal", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_parent_leaves_no_server(
    parent_signal: signal.Signals, tiny_model_dir: Path, workspace: Workspace, tmp_path: Path
) -> None:
    """SIGTERM: the parent stops the server itself. SIGKILL: the parent-death signal does; the pidfile
    stays behind and the next start finds nothing left to kill."""
    log_path = tmp_path / "child.log"
    args = [tiny_model_dir, workspace.root, workspace.cache, workspace.serve_venv, log_path]
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD, *map(str, args)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        pgid = int(parent.stdout.readline())
        assert live_group_members(pgid)
        parent.send_signal(parent_signal)
        parent.wait(timeout=60)
        assert wait_until_gone(pgid, 30) == []
    finally:
        parent.kill()
        parent.wait()
    pidfile = log_path.with_suffix(".pid")
    assert pidfile.exists() == (parent_signal == signal.SIGKILL)
    assert kill_stale_server(pidfile, STOP_GRACE_S) is False and not pidfile.exists()


def test_gpu_command_carries_tp_kv_dtype_and_fixed_kv_pool() -> None:
    profile = load_profile("rtx4090-same-kv").model_copy(
        update={"tensor_parallel_size": 2, "kv_cache_dtype": "fp8"}
    )
    command = vllm_command(VLLM_BIN, Path("/models/x"), "awq", profile, 8123, on_gpu=True)
    assert flag_value(command, "--tensor-parallel-size") == "2"
    assert flag_value(command, "--kv-cache-dtype") == "fp8"
    assert flag_value(command, "--gpu-memory-utilization") == "0.92"
    assert flag_value(command, "--kv-cache-memory-bytes") == str(8 * GiB)
    defaults = vllm_command(
        VLLM_BIN, Path("/models/x"), "awq", load_profile("rtx4090-16k"), 8123, on_gpu=True
    )
    assert "--tensor-parallel-size" not in defaults and "--kv-cache-memory-bytes" not in defaults
    assert "--cpu-offload-gb" not in defaults
    offloaded = load_profile("rtx4090-16k").model_copy(update={"cpu_offload_gib": 11.0})
    assert (
        flag_value(vllm_command(VLLM_BIN, Path("/m"), "bf16", offloaded, 1, on_gpu=True), "--cpu-offload-gb")
        == "11"
    )


def test_startup_seconds_reads_the_log_from_first_stamp_to_serving() -> None:
    from evals.serving.vllm_log import startup_seconds

    log = (
        "INFO 12-01 12:43:16 [utils.py:253] non-default args: {'model': '/m'}\n"
        "(EngineCore pid=9) INFO 12-01 12:44:01 [core.py:90] Initializing a V1 LLM engine\n"
        "(APIServer pid=8) INFO 12-01 12:45:09 [entry.py:140] Starting vLLM server on http://127.0.0.1:39013\n"
    )
    assert startup_seconds(log) == 113.0
    assert startup_seconds(log.rsplit("(APIServer", 1)[0]) is None  # it never got to serving
    assert startup_seconds("no stamps at all") is None


# --- the server guard --------------------------------------------------------------------------------

STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('up', flush=True); time.sleep(600)"
)
"""A child that ignores SIGTERM, as an engine process stuck in a kernel would."""
PROMPT = "import time; print('up', flush=True); time.sleep(600)"
"""A child that ends at once on SIGTERM, as vLLM's API server does."""


def start_guard(child_code: str) -> subprocess.Popen[str]:
    guard = subprocess.Popen(
        [sys.executable, "-I", "-S", str(SERVER_GUARD), sys.executable, "-c", child_code],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert guard.stdout is not None and guard.stdout.readline() == "up\n"
    return guard


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_guard_ends_with_a_child_that_ends_and_takes_its_group_down(sig: signal.Signals) -> None:
    guard = start_guard(PROMPT)
    started = time.monotonic()
    guard.send_signal(sig)
    guard.wait(timeout=GRACE_S + 10)
    # it waits for the child, not out the grace period (it once did: 20 s per server stop)
    assert time.monotonic() - started < GRACE_S / 4
    assert wait_until_gone(guard.pid, 5) == []


def test_the_guard_kills_a_child_that_ignores_sigterm_after_the_grace_period() -> None:
    guard = start_guard(STUBBORN)
    started = time.monotonic()
    guard.send_signal(signal.SIGTERM)
    guard.wait(timeout=GRACE_S + 30)
    assert time.monotonic() - started >= GRACE_S
    assert wait_until_gone(guard.pid, 5) == []
