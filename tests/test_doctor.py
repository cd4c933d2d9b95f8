"""`kqe doctor`: vLLM's own out-of-memory messages of each kind, numbers taken from the log, bad input."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from evals.planning.planner import plan
from evals.planning.vllm_memory import PlanRequest, load_gpus
from evals.serving.doctor.diagnose import diagnose
from evals.serving.serve import load_profile
from evals.serving.vllm_log import log_lines
from kqe.commands.doctor import doctor_command
from kqe.core.errors import UserError
from kqe.core.registry import load_registry
from tests.helpers.cli import assert_one_line_error, invoke_command

ERRORS = Path(__file__).parent / "data" / "vllm_errors"
LOGS = Path(__file__).parent / "data" / "vllm_logs"
EXPECTED = {"a": "A", "b": "B", "c": "C", "d": "D", "ok": None}


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def found(pattern: str, where: str) -> tuple[str, ...]:
    """The groups of the first match of `pattern` (it must match)."""
    match = re.search(pattern, where)
    assert match, pattern
    return match.groups()


@pytest.mark.parametrize("log", sorted(ERRORS.glob("*.log")), ids=lambda p: p.name)
def test_each_kind_of_vllm_message_gets_its_pattern(log: Path) -> None:
    expected = EXPECTED[log.name.split("_")[0]]
    diagnosis = diagnose(text(log))

    assert diagnosis.pattern == expected
    if expected is None:
        assert diagnosis.evidence is None and diagnosis.advice == []
        return
    assert diagnosis.evidence is not None
    assert diagnosis.evidence.rstrip("…") in text(log)  # a line of the log, prefix removed
    assert diagnosis.advice
    assert f"pattern {expected}" in diagnosis.summary


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cpu_fail_kv_cache_too_big.log", "B"),
        ("cpu_fail_unknown_architecture.log", None),
        ("cpu_tiny_llama_cpu-small.log", None),
        ("cpu_268m_llama_cpu-ci.log", None),
    ],
)
def test_real_vllm_cpu_logs(name: str, expected: str | None) -> None:
    assert diagnose(text(LOGS / name)).pattern == expected


def test_a_kv_pool_larger_than_the_machine_gets_a_size_that_fits() -> None:
    log = text(LOGS / "cpu_fail_kv_cache_too_big.log")
    available = float(found(r"Available memory on node 0 \(([\d.]+)/", log)[0])
    advice = diagnose(log).advice[0]

    suggested = float(found(r"≤ ([\d.]+) GiB", advice)[0])
    assert 0 < suggested < available


def test_long_max_model_len_advice_carries_vllms_estimate() -> None:
    log = text(ERRORS / "c_max_model_len.log")
    estimate = found(r"estimated maximum model length is (\d+)", log)[0]
    diagnosis = diagnose(log)

    assert diagnosis.advice[0] == f"parameters: --max-model-len {estimate} (vLLM's estimate of what fits)"
    assert f"{int(estimate):,}" in diagnosis.summary


def test_shared_gpu_advice_asks_for_no_more_than_is_free() -> None:
    log = text(ERRORS / "d_free_memory_at_startup.log")
    free, total = map(float, found(r"\(([\d.]+)/([\d.]+) GiB\) on startup", log))
    diagnosis = diagnose(log)

    assert "nvidia-smi" in diagnosis.advice[0]
    utilization = float(found(r"--gpu-memory-utilization ([\d.]+)", diagnosis.advice[1])[0])
    assert utilization * total <= free


def test_preemption_advice_caps_sequences_at_the_logged_concurrency() -> None:
    log = text(ERRORS / "b_preemptions.log")
    concurrency = float(found(r"per request: ([\d.]+)x", log)[0])

    assert f"--max-num-seqs {math.floor(concurrency)}:" in diagnose(log).advice[0]


def test_graph_capture_oom_tries_enforce_eager_first() -> None:
    assert "--enforce-eager" in diagnose(text(ERRORS / "b_cuda_graph_capture_oom.log")).advice[0]


def test_other_processes_in_another_pid_namespace_are_not_blamed() -> None:
    # in a container PyTorch may list this process under its host pid, without "this process"
    log = re.sub(
        r"Including non-PyTorch memory, this process has [\d.]+ GiB memory in use\. ",
        "",
        text(ERRORS / "d_torch_oom_other_process.log"),
    )

    assert diagnose(log).pattern == "A"  # it failed while loading the weights


def test_a_log_with_a_retried_start_is_judged_by_its_last_start() -> None:
    failed = text(ERRORS / "c_max_model_len.log")
    healthy = text(ERRORS / "ok_gemma3_270m_bf16_cpu-small.log")

    assert diagnose(failed + healthy).pattern is None
    assert diagnose(healthy + failed).pattern == "C"


def test_settings_come_from_the_log_else_from_the_profile() -> None:
    log = text(ERRORS / "b_no_cache_blocks.log")
    without_args = "\n".join(line for line in log.splitlines() if "non-default args" not in line)

    assert "utilization 0.68" in diagnose(log).summary
    assert "utilization 0.8" in diagnose(without_args, load_profile("shared-gpu")).summary
    assert "utilization the default 0.92" in diagnose(without_args).summary


@pytest.mark.parametrize(
    ("log", "scheme", "update"),
    [
        ("a_weights_load_oom.log", "bf16", {}),
        ("b_no_cache_blocks.log", "fp8-dynamic", {"gpu_memory_utilization": 0.68}),
        ("c_max_model_len.log", "fp8-dynamic", {"max_model_len": 32768}),
    ],
)
def test_planner_and_doctor_name_the_same_pattern(log: str, scheme: str, update: dict) -> None:
    gpu = load_gpus()["rtx4090"]
    settings = {"max_model_len": 16384, "max_num_seqs": 24} | update
    request = PlanRequest(
        model=load_registry()["qwen2.5-14b"], scheme=scheme, gpu=gpu.name, gpu_gib=gpu.memory_gib, **settings
    )

    assert plan(request).pattern == diagnose(text(ERRORS / log)).pattern


# --- bad input: one line, exit 2 ------------------------------------------------------------------


def doctor(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(doctor_command, list(args))
    return result.exit_code, result.output


def test_json_output_has_the_issues_keys() -> None:
    code, output = doctor(str(ERRORS / "d_memory_profiling.log"), "--json")

    assert code == 0
    out = json.loads(output)
    assert {"pattern", "evidence", "advice"} <= set(out)
    assert out["pattern"] == "D"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "not found"),
        (b"", "is empty"),
        (b" \n\t\n", "is empty"),
        (b"\x7fELF\x00\x01\x02", "binary"),
    ],
)
def test_missing_empty_or_binary_logs_are_one_line_errors(
    tmp_path: Path, content: bytes | None, needle: str
) -> None:
    path = tmp_path / "server.log"
    if content is not None:
        path.write_bytes(content)

    assert_one_line_error(invoke_command(doctor_command, str(path)), needle)
    with pytest.raises(UserError, match=needle):
        list(log_lines(path))


def test_a_directory_is_not_a_log(tmp_path: Path) -> None:
    assert_one_line_error(invoke_command(doctor_command, str(tmp_path)), "is a folder, not a file")


# --- standard input, --metrics, --nvidia-smi ------------------------------------------------------

METRICS = Path(__file__).parent / "data" / "vllm_metrics"


def test_standard_input_is_read_as_a_log() -> None:
    log = text(ERRORS / "c_max_model_len.log")
    result = CliRunner().invoke(doctor_command, ["-", "--json"], input=log.encode())

    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["pattern"] == "C"


def test_empty_standard_input_is_a_one_line_error() -> None:
    result = CliRunner().invoke(doctor_command, ["-"], input=b"\n\n")

    assert_one_line_error(result, "standard input is empty")


def under_pressure(prom: str) -> str:
    """A real /metrics capture with the KV cache 99.2% full, 7 requests waiting and 4 running."""
    for name, value in (
        ("kv_cache_usage_perc", "0.992"),
        ("num_requests_waiting", "7.0"),
        ("num_requests_running", "4.0"),
    ):
        prom = re.sub(rf"^(vllm:{name}\{{[^}}]*\}}) \S+$", rf"\g<1> {value}", prom, flags=re.MULTILINE)
    return prom


def test_metrics_of_an_idle_server_show_no_pressure() -> None:
    from evals.serving.doctor.diagnose import diagnose_metrics

    diagnosis = diagnose_metrics(text(METRICS / "tiny_cpu_after_load.prom"), "capture")

    assert diagnosis.pattern is None and "no KV pressure now" in diagnosis.summary
    assert diagnosis.numbers == {"kv_usage_pct": 0.0, "waiting": 0.0, "running": 0.0, "preemptions": 3.0}


def test_metrics_with_a_full_cache_and_waiting_requests_are_pattern_b() -> None:
    from evals.serving.doctor.diagnose import diagnose_metrics

    diagnosis = diagnose_metrics(under_pressure(text(METRICS / "tiny_cpu_after_load.prom")), "capture")

    assert diagnosis.pattern == "B"
    assert diagnosis.numbers["kv_usage_pct"] == 99.2 and diagnosis.numbers["waiting"] == 7
    assert "3 preemptions since start" in diagnosis.summary


@pytest.fixture
def local_server() -> Iterator[Callable[[int, str], str]]:
    """A tiny HTTP server on 127.0.0.1 answering every GET with the status and body given."""
    answer = {"status": 200, "body": ""}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = answer["body"].encode()
            self.send_response(int(answer["status"]))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def serve(status: int, body: str) -> str:
        answer.update(status=status, body=body)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    server.shutdown()
    server.server_close()


def test_metrics_url_of_a_running_server(local_server: Callable[[int, str], str]) -> None:
    url = local_server(200, under_pressure(text(METRICS / "tiny_cpu_before_load.prom")))
    code, output = doctor("--metrics", url, "--json")

    assert code == 0, output
    assert json.loads(output)["pattern"] == "B"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("status", "body", "needle"),
    [
        (200, "<html>hello</html>", "is not a vLLM /metrics page"),
        (404, "not found", "HTTP 404"),
        (None, "", "no answer"),
    ],
)
def test_bad_metrics_urls_are_one_line_errors(
    local_server: Callable[[int, str], str], status: int | None, body: str, needle: str
) -> None:
    url = local_server(status, body) if status else f"http://127.0.0.1:{free_port()}"
    assert_one_line_error(invoke_command(doctor_command, "--metrics", url), needle)


def test_an_unreadable_log_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "server.log"
    path.write_text("INFO 06-15 14:02:40 [api_server.py:1] started\n")

    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "open", refuse)  # root reads any file: a refused open stands in for chmod 000
    assert_one_line_error(invoke_command(doctor_command, str(path)), "cannot be read (Permission denied)")


def test_a_missing_nvidia_smi_file_is_a_one_line_error(tmp_path: Path) -> None:
    result = invoke_command(
        doctor_command, str(ERRORS / "d_free_memory_at_startup.log"), "--nvidia-smi", str(tmp_path / "no.txt")
    )
    assert_one_line_error(result, "--nvidia-smi", "nvidia-smi > smi.txt")


def test_nvidia_smi_file_names_the_other_process(tmp_path: Path) -> None:
    smi = tmp_path / "smi.txt"
    smi.write_text(
        "| NVIDIA-SMI 550.163.01             Driver Version: 550.163.01     CUDA Version: 12.4     |\n"
        "|    0   N/A  N/A      7311      C   python3 train_lora.py                        12800MiB |\n"
    )
    code, output = doctor(str(ERRORS / "d_free_memory_at_startup.log"), "--nvidia-smi", str(smi))

    assert code == 0 and "7311 python3 train_lora.py (12.50 GiB)" in output


def test_without_a_file_this_machines_nvidia_smi_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = tmp_path / "bin" / "nvidia-smi"  # a stand-in on PATH printing a process table
    smi.parent.mkdir()
    smi.write_text(
        "#!/bin/sh\necho '|    0   N/A  N/A      7311      C   python3 train_lora.py      12800MiB |'\n"
    )
    smi.chmod(0o755)
    log = str(ERRORS / "d_free_memory_at_startup.log")
    assert "7311" not in doctor(log)[1]
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    code, output = doctor(log)

    assert code == 0 and "7311 python3 train_lora.py (12.50 GiB)" in output


def test_a_large_log_is_read_line_by_line(tmp_path: Path) -> None:
    healthy = text(ERRORS / "ok_gemma3_270m_bf16_cpu-small.log")
    path = tmp_path / "big.log"
    with path.open("w", encoding="utf-8") as out:
        for _ in range(60):
            out.write(healthy)
        out.write(text(ERRORS / "d_memory_profiling.log"))
    lines = log_lines(path)

    assert not isinstance(lines, list)  # an iterator: the file is never held whole
    assert diagnose(lines).pattern == "D"
