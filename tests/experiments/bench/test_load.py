"""Section ``load``: quiet and beside a busy process, threads before and after.

No timing is asserted (the machine is shared); the arms, the busy process's life, the
platform's choice under it and the same tokens in every arm are.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from experiments.bench.core.options import BenchOptions
from experiments.bench.decode import load as load_section
from steering.cpu import CpuLoad


@pytest.fixture
def quiet_env(monkeypatch):
    monkeypatch.delenv("STEER_EVAL_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def test_the_busy_process_lives_for_the_block_only():
    with load_section.busy_process() as pid:
        os.kill(pid, 0)  # running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_section_times_four_arms_on_the_same_tokens(
    tiny_lm, synthetic_workload, monkeypatch, quiet_env
):
    import steering.platform as platform

    seen: list[bool] = []

    def load_now() -> CpuLoad:  # the platform's reading: one core taken while busy
        busy = load_section.BUSY_CODE in " ".join(_children())
        seen.append(busy)
        return CpuLoad(2, 1.0 if busy else 0.0, "test")

    monkeypatch.setattr(platform, "cpu_load", load_now)
    monkeypatch.setattr(load_section, "SETTLE_SECONDS", 0.2)
    monkeypatch.setattr(load_section, "usable_cpus", lambda: {0, 1})
    before = torch.get_num_threads()
    wl = synthetic_workload(tiny_lm, n_concepts=2, max_new_tokens=4)
    out = load_section.section_load(
        tiny_lm, wl, BenchOptions(repeats=1, load_concepts=1), lambda _m: None
    )
    assert torch.get_num_threads() == before
    assert seen == [False, True]
    assert set(out["runs"]) == {"quiet/before", "quiet/after", "busy/before", "busy/after"}
    assert out["threads_before"] == 2
    assert [c["threads"] for c in out["threads_after"]["busy"]] == [1]
    assert [c["threads"] for c in out["threads_after"]["quiet"]] == [2]
    assert all(out["same_tokens_as_quiet_before"].values())
    runs = out["runs"]
    assert out["ratio_busy_vs_quiet_after"] == pytest.approx(
        runs["busy/after"]["median_seconds"] / runs["quiet/after"]["median_seconds"], rel=1e-2
    )
    assert out["rows"] == len(wl.rows) // 2 and out["cpu"]["usable_cpus"] == 2


def _children() -> list[str]:
    """The command lines of this process's children (Linux)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) != os.getpid():
                continue
            out.append((proc / "cmdline").read_text().replace("\0", " "))
        except (OSError, ValueError, IndexError):
            continue
    return out
