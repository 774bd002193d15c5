"""experiments.bench.e2e: peak memory per phase, the child's command line, and the
default and bf16 runs timed in turn."""

from __future__ import annotations

import pytest
import torch

from experiments.bench.core.options import BenchOptions
from experiments.bench.e2e import PeakMemory, main, section_e2e


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


@pytest.mark.integration
def test_e2e_times_the_default_and_bf16_alternately(tmp_path):
    # The real child processes on a small grid of the embedded model: an untimed bf16 run
    # first (it trains the bf16 classifiers), then the default and bf16 in turn.
    opts = BenchOptions(e2e_repeats=1)
    overrides = [
        "concepts.limit=2",
        "generation.max_new_tokens=4",
        "generation.batch_size=6",
        f"classifier.dir={tmp_path / 'classifiers'}",
    ]
    said: list[str] = []
    out = section_e2e(opts, overrides, tmp_path, said.append, bf16_arm=True)
    assert [m.split(":")[1].strip()[:8] for m in said] == ["one unti", "make run", "the same"]
    assert [r["dtype"] for r in out["runs"]] == ["float32"]
    assert [r["dtype"] for r in out["bfloat16"]["runs"]] == ["bfloat16"]
    for summary in (out, out["bfloat16"]):
        assert summary["n_generations"] > 0 and summary["peak_rss_gb"] > 0
        assert summary["criteria"]["c3_f1_correlation"]["status"] in {
            "pass",
            "fail",
            "inconclusive",
            "not_evaluable",
        }
    ratio = out["median_process_wall_seconds"] / out["bfloat16"]["median_process_wall_seconds"]
    assert out["ratio_default_over_bf16"] == pytest.approx(ratio, abs=1e-3)
    # each dtype trained its own classifiers (probes carry their dtype), each in a
    # Phase 4 run whose folder is under runs/
    sets = [p for p in (tmp_path / "classifiers").iterdir() if p.name != "runs"]
    assert len(sets) == 2 and len(list((tmp_path / "classifiers" / "runs").iterdir())) == 2
