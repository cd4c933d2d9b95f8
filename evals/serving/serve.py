"""Serve one checkpoint with `vllm serve` under a named serve profile, and always take it down again.

Pure core: `load_profile`, the command line and environment (`evals/serving/serve_command.py`) and the
telling line of a failed start (`evals/serving/vllm_log.py`). Shell: `VllmServer`, a context manager that
starts the server in its own process group, waits for it, and kills the whole group on exit, on
exceptions, on Ctrl-C and on SIGTERM.

A parent killed with SIGKILL cannot clean up. Two things cover that: the server gets the parent-death
signal SIGTERM (`setpriv --pdeathsig`, when started from the main thread), and its pid is written to
`<log>.pid`, so the next start with the same log kills a server left behind (`kill_stale_server`).
A server that dies while in use is started again by `restart` (the pipeline does, `RESTARTS` times).

Security: the server listens on 127.0.0.1 only, with a fresh random API key per server (passed in the
environment, never on the command line), loads safetensors weights only, and runs a checkpoint's own
Python code only when `trust_remote_code` is set.
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

from pydantic import ValidationError

from evals.serving import hardware
from evals.serving.endpoint import Endpoint
from evals.serving.memory import parse_memory
from evals.serving.ports import HOST, forced_port, free_port
from evals.serving.serve_command import server_environment, vllm_command
from evals.serving.stale_server import kill_stale_server
from evals.serving.vllm_log import telling_line
from kqe.core.errors import UserError
from kqe.core.io import loads_toml, open_writable, owned_folder, refuse_link, write_atomic
from kqe.core.processes import start_in_group, stop_group, with_parent_death_signal
from kqe.core.records import Engine, MemoryReport, ServeProfile
from kqe.core.workspace import Workspace

log = logging.getLogger(__name__)

PROFILES_PATH = Path(__file__).with_name("profiles.toml")
SERVER_GUARD = Path(__file__).with_name("server_guard.py")
_POLL_S = 0.5
RESTARTS = 2
"""Times a server that died while in use is started again before its checkpoint is marked failed."""
STOP_GRACE_S = 20.0
"""How long a server gets to shut down after SIGTERM before what is left of it gets SIGKILL
(server_guard.GRACE_S gives vLLM as long)."""


class ServeError(UserError):
    """vLLM could not serve a checkpoint: the message names it, the telling log line and the log."""


# --- profiles ---------------------------------------------------------------------------------


def _read_profiles(path: Path) -> dict[str, ServeProfile]:
    tables = loads_toml(path.read_text(encoding="utf-8"))
    profiles = {}
    for name, fields in tables.items():
        try:
            profiles[name] = ServeProfile(name=name, **fields)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise UserError(f"serve profile [{name}] in {path}: {where}: {first['msg']}") from None
    return profiles


def engine_version(ws: Workspace) -> str:
    """Version of the serving engine in the serve environment (its dist-info), without importing it."""
    found = sorted(ws.serve_venv.glob("lib/python*/site-packages/vllm-*.dist-info"))
    return found[-1].name.removeprefix("vllm-").removesuffix(".dist-info") if found else "missing"


def profile_names(path: Path = PROFILES_PATH) -> list[str]:
    """Names of the serve profiles, in file order."""
    return list(_read_profiles(path))


def serve_profiles(path: Path = PROFILES_PATH) -> list[ServeProfile]:
    """Every serve profile, in file order."""
    return list(_read_profiles(path).values())


def load_profile(name: str, path: Path = PROFILES_PATH) -> ServeProfile:
    """The serve profile called `name`; UserError listing the known names otherwise."""
    profiles = _read_profiles(path)
    if name not in profiles:
        raise UserError(f"unknown serve profile {name!r}: choose one of {', '.join(profiles)} ({path})")
    return profiles[name]


def local_profile(name: str, ws: Workspace) -> ServeProfile:
    """The serve profile `name` made concrete for the device this machine serves on."""
    return hardware.for_device(load_profile(name), hardware.local_device(ws.serve_venv))


def check_serve_env(ws: Workspace) -> Path:
    """The `vllm` executable of the serve environment; UserError when it is not installed."""
    vllm_bin = ws.serve_venv / "bin" / "vllm"
    if not vllm_bin.exists():
        raise UserError(f"serve environment missing at {ws.serve_venv}: run `make setup`")
    return vllm_bin


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # localhost never via a proxy


def _http_get(url: str, api_key: str | None = None, timeout_s: float = 5.0) -> tuple[int, bytes] | None:
    """Status and body of a GET, or None when nothing answers."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with _NO_PROXY.open(urllib.request.Request(url, headers=headers), timeout=timeout_s) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as error:
        return int(error.code), b""
    except (urllib.error.URLError, OSError):
        return None


# --- shell: cleanup when the parent ends --------------------------------------------------------

_live_servers: set[VllmServer] = set()


def _stop_live_servers() -> None:
    for server in list(_live_servers):
        server.stop()


atexit.register(_stop_live_servers)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _guard_sigterm() -> None:
    """While a server runs, SIGTERM raises SystemExit so that `with` blocks and atexit stop it.

    Only a default handler is replaced: an application that handles SIGTERM itself keeps its handler.
    """
    if _in_main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _unguard_sigterm() -> None:
    if not _live_servers and _in_main_thread() and signal.getsignal(signal.SIGTERM) is _exit_on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# --- shell: the server ------------------------------------------------------------------------


class VllmServer:
    """`with VllmServer(...) as server:` serves `model_dir` as `served_name` on a free local port."""

    def __init__(
        self,
        model_dir: Path,
        served_name: str,
        profile: ServeProfile,
        ws: Workspace,
        log_path: Path,
        start_timeout_s: float = 600,
        trust_remote_code: bool = False,
    ) -> None:
        self.model_dir = model_dir
        self.trust_remote_code = trust_remote_code
        self.served_name = served_name
        self.profile = profile
        self.ws = ws
        self.log_path = log_path
        self.start_timeout_s = start_timeout_s
        self.api_key = secrets.token_urlsafe(24)
        self.on_gpu = False
        self.port: int | None = None
        self.pid: int | None = None  # process (= process group) id of the last start; kept after stop
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server has not been started")
        return f"http://{HOST}:{self.port}"

    @property
    def pidfile(self) -> Path:
        return self.log_path.with_suffix(".pid")

    def __enter__(self) -> VllmServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def memory(self) -> MemoryReport:
        """What vLLM reported about memory in the log so far."""
        device: Engine = "gpu" if self.on_gpu else "cpu"
        return parse_memory(self._log_text(), self.profile.max_model_len, device=device)

    def restart(self) -> None:
        """Stop what is left of the server and start it again (new port, same key), keeping its log."""
        self.stop()
        with open_writable(self.log_path, append=True) as log_file:
            log_file.write("\n[kqe] the server ended unexpectedly; starting it again\n")
        self.start(append_log=True)

    @property
    def endpoint(self) -> Endpoint:
        """How clients reach this server."""
        return Endpoint(self.base_url, self.api_key, self.served_name)

    def start(self, append_log: bool = False) -> None:
        """Start the server and wait until it answers; ServeError (one line) when it cannot."""
        vllm_bin = check_serve_env(self.ws)
        if not (self.model_dir / "config.json").is_file():
            raise ServeError(f"checkpoint {self.served_name}: {self.model_dir} has no config.json")
        owned_folder(self.log_path.parent)
        refuse_link(self.log_path), refuse_link(self.pidfile)  # before a stale pid is read or a log written
        kill_stale_server(self.pidfile, STOP_GRACE_S)
        self.on_gpu = hardware.local_device(self.ws.serve_venv).engine == "gpu"
        port_asked = forced_port()
        for attempt in (1, 2):
            self.port = port_asked or free_port()
            self._launch(vllm_bin, append_log=append_log or attempt > 1)
            failure = self._wait_ready()
            if failure is None:
                log.info("serving %s at %s (log %s)", self.served_name, self.base_url, self.log_path)
                return
            self.stop()
            port_taken = "Address already in use" in self._log_text()
            if port_taken and port_asked is not None:
                raise UserError(
                    f"KQE_PORT={port_asked} is already in use on {HOST}: free it or unset KQE_PORT"
                )
            if not (port_taken and attempt == 1):
                break
            log.info("port %d was taken before vLLM bound it; retrying on another port", self.port)
        line = telling_line(self._log_text())
        detail = f": {line}" if line else ""
        raise ServeError(
            f"vllm serve could not serve checkpoint {self.served_name} ({self.model_dir}): "
            f"{failure}{detail} (full log: {self.log_path})"
        )

    def stop(self) -> None:
        """Stop the server and everything it started; SIGKILL what is left after STOP_GRACE_S. Idempotent."""
        process = self._process
        if process is None:
            return
        # the guard leads its own session (its pid is the group id); SIGTERM to it first lets vLLM's API
        # server shut its engine down cleanly
        stubborn = "vLLM server of %s outlived SIGTERM: killing it"
        stop_group(
            process.pid,
            STOP_GRACE_S,
            leader=process,
            on_stubborn=lambda: log.warning(stubborn, self.served_name),
        )
        self.pidfile.unlink(missing_ok=True)
        self._process = None
        _live_servers.discard(self)
        _unguard_sigterm()

    def _launch(self, vllm_bin: Path, append_log: bool) -> None:
        assert self.port is not None
        command = vllm_command(
            vllm_bin,
            self.model_dir,
            self.served_name,
            self.profile,
            self.port,
            self.on_gpu,
            self.trust_remote_code,
        )
        # the guard leads the server's process group and takes all of it down when this thread ends,
        # even by SIGKILL (parent-death signals follow the thread that forks: the one whose `with`
        # block stops the server); the server's own parent-death signal covers the guard's SIGKILL.
        # -I -S: the server's environment (a sitecustomize that imports torch) is vLLM's, not the guard's
        inner = with_parent_death_signal(command, signal.SIGTERM)
        guard = [sys.executable, "-I", "-S", str(SERVER_GUARD), *inner]
        env = server_environment(os.environ, self.profile, self.ws, self.on_gpu, self.api_key)
        with open_writable(self.log_path, append=append_log) as log_file:
            self._process = start_in_group(
                guard,
                signal.SIGTERM,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.pid = self._process.pid
        _live_servers.add(self)
        _guard_sigterm()
        write_atomic(self.pidfile, f"{self.pid}\n")

    def _wait_ready(self) -> str | None:
        """None once the server answers as itself; otherwise why it never did."""
        assert self._process is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                return f"the server exited with code {code} during start-up"
            answer = _http_get(f"{self.base_url}/health", timeout_s=2)
            if answer is not None and answer[0] == 200:
                return self._check_identity()
            time.sleep(_POLL_S)
        return f"not ready after {self.start_timeout_s:.0f} s"

    def _check_identity(self) -> str | None:
        """Whatever answers /health must be our server: it must know our key and our model name."""
        answer = _http_get(f"{self.base_url}/v1/models", api_key=self.api_key)
        if answer is not None and answer[0] == 200 and self.served_name.encode() in answer[1]:
            return None
        status = "no answer" if answer is None else f"HTTP {answer[0]}"
        return f"port {self.port} answered /health but GET /v1/models with our key gave {status}"

    def _log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""
