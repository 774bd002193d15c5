"""The local executor and the executor choice: plan order, lazy Ray, a clear config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from experiments.config import ConfigError, load_config
from experiments.execution import LocalExecutor, PlanSpec, make_executor
from experiments.execution.ray import RayExecutor
from steering.generation import GenerationRow, SamplingConfig, generate_batch

REPO = Path(__file__).resolve().parents[3]


def test_local_batches_come_back_in_plan_order_with_their_stage_times(tiny_lm, one_thread):
    rows = [GenerationRow(f"k{i}", "tell me a story", seed=i) for i in range(5)]
    spec = PlanSpec(None, 1, "additive", SamplingConfig(max_new_tokens=4))
    results = list(LocalExecutor(tiny_lm).run(spec, [rows[:2], rows[2:4], rows[4:]]))
    assert [r.index for r in results] == [0, 1, 2]
    assert [g.key for r in results for g in r.generations] == [r.key for r in rows]
    assert all("generation" in r.timings and r.worker == "local" for r in results)
    direct, _ = generate_batch(tiny_lm, rows[:2], None, 1, "additive", spec.sampling)
    assert [g.text for g in results[0].generations] == [g.text for g in direct]
    # Unsteered rows take their NLL from the sampled log-probs, no second pass.
    assert all(x is not None for r in results for x in r.nll) and not any(
        "perplexity" in r.timings for r in results
    )


def test_the_config_picks_the_executor(tiny_lm):
    assert isinstance(make_executor(load_config(None), tiny_lm), LocalExecutor)
    config = load_config(None, ["execution.executor=ray", "execution.workers=3"])
    executor = make_executor(config, tiny_lm)
    assert isinstance(executor, RayExecutor) and executor.workers == 3
    assert executor.source.spec == config.model
    with pytest.raises(ConfigError, match=r"execution.executor"):
        load_config(None, ["execution.executor=dask"])


def test_the_execution_section_does_not_change_the_config_hash():
    local = load_config(None)
    ray = load_config(None, ["execution.executor=ray", "execution.workers=4"])
    assert local.config_hash() == ray.config_hash()
    assert local.config_hash() != load_config(None, ["seed=1"]).config_hash()


def test_run_help_imports_neither_ray_nor_the_executors():
    code = (
        "import sys; from experiments.cli import app\n"
        "try:\n    app(['run', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('RAY' if 'ray' in sys.modules else 'NO-RAY', "
        "'EXEC' if 'experiments.execution' in sys.modules else 'NO-EXEC', file=sys.stderr)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert "--executor" in out.stdout
    assert out.stderr.strip().endswith("NO-RAY NO-EXEC"), out.stderr[-2000:]
