"""experiments.bench.e2e: peak memory per phase, and the child's command line."""

from __future__ import annotations

import torch

from experiments.bench.e2e import PeakMemory, main


def test_peak_memory_per_phase():
    memory = PeakMemory()
    memory.enter("allocate")
    block = torch.ones(8 * 1024 * 1024)  # 32 MB, touched
    memory.enter("after")
    peak, phases = memory.finish()
    del block
    assert set(phases) == {"start (interpreter, imports, config)", "allocate", "after"}
    assert peak == max(phases.values()) > 32e6


def test_child_refuses_anything_but_one_spec(capsys):
    assert main([]) == 2
    assert "internal" in capsys.readouterr().err
