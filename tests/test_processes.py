"""Child processes in their own group (kqe/core/processes.py), on real processes: stopping a group,
the parent-death signal, the wait that reports a child's own peak memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kqe.core.processes import (
    group_members,
    signal_group,
    start_in_group,
    stop_group,
    wait_group_gone,
    wait_with_usage,
)
from tests.helpers.repo import REPO

STUBBORN_MEMBER = """
import subprocess, sys, time
ignore = "import signal as s, time; s.signal(s.SIGTERM, s.SIG_IGN); print(flush=True); time.sleep(600)"
member = subprocess.Popen([sys.executable, "-c", ignore], stdout=subprocess.PIPE)
member.stdout.readline()
print("up", flush=True)
time.sleep(600)
"""
"""A leader that ends on SIGTERM beside a member that ignores it, as vLLM's engine stuck in a kernel."""


def start_leader(code: str) -> subprocess.Popen[bytes]:
    leader = start_in_group([sys.executable, "-c", code], None, stdout=subprocess.PIPE)
    assert leader.stdout is not None and leader.stdout.readline() == b"up\n"
    return leader


def test_a_group_that_outlives_sigterm_is_killed_after_the_grace() -> None:
    leader = start_leader(STUBBORN_MEMBER)
    assert os.getpgid(leader.pid) == leader.pid and len(group_members(leader.pid)) == 2
    stubborn: list[int] = []
    started = time.monotonic()
    stop_group(
        leader.pid, 1.0, leader=leader, on_stubborn=lambda: stubborn.append(len(group_members(leader.pid)))
    )
    assert time.monotonic() - started >= 1.0
    assert stubborn == [1]  # the member that ignored SIGTERM, told of before it was killed
    assert group_members(leader.pid) == [] and leader.returncode == -signal.SIGTERM


def test_a_group_that_ends_on_sigterm_is_not_waited_out() -> None:
    leader = start_leader("import time; print('up', flush=True); time.sleep(600)")
    stubborn: list[int] = []
    started = time.monotonic()
    stop_group(leader.pid, 20.0, leader=leader, on_stubborn=lambda: stubborn.append(1))
    assert time.monotonic() - started < 10 and stubborn == []
    assert leader.returncode == -signal.SIGTERM


def test_a_child_in_its_group_dies_with_its_parent_even_by_sigkill() -> None:
    code = (
        "import signal, subprocess; from kqe.core.processes import start_in_group; "
        "child = start_in_group(['sleep', '600'], signal.SIGKILL); print(child.pid, flush=True); "
        "import time; time.sleep(600)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert os.getpgid(child) == child != os.getpgid(parent.pid)
        comm = Path(f"/proc/{child}/comm")
        while comm.read_text() != "sleep\n":  # setpriv sets the signal, then becomes the command
            time.sleep(0.05)
        parent.kill()
        parent.wait()
        assert wait_group_gone(child, 10), "the child outlived its parent killed by SIGKILL"
    finally:
        signal_group(child, signal.SIGKILL)


def test_the_wait_reports_the_exit_code_and_the_childs_own_peak_memory() -> None:
    code = "import sys, time; block = bytearray(64 << 20); time.sleep(0.5); sys.exit(3)"
    child = subprocess.Popen([sys.executable, "-c", code])
    polls: list[int] = []
    returncode, usage = wait_with_usage(child.pid, lambda: polls.append(1), poll_s=0.05)
    child.returncode = returncode
    assert returncode == 3 and polls
    assert usage.ru_maxrss * 1024 >= 64 << 20

    killed = subprocess.Popen(["sleep", "600"])
    killed.kill()
    killed.returncode, _ = wait_with_usage(killed.pid, lambda: None, poll_s=0.05)
    assert killed.returncode == -signal.SIGKILL
