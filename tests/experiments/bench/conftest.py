"""One --quick bench run on the tiny model, shared by the bench tests that read results."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _synthetic():
    """tests/experiments/bench/synthetic.py, loaded by path (tests are not a package)."""
    name = "steer_eval_tests_bench_synthetic"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("synthetic.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def synthetic_workload():
    """synthetic_workload(lm, n_concepts=2, ...): random directions on the grid layout."""
    return _synthetic().synthetic_workload


@pytest.fixture(scope="package")
def quick_results(tiny_lm, tmp_path_factory):
    """A --quick run of every section that applies to synthetic rows on the tiny model."""
    from experiments.bench.core.options import BenchOptions
    from experiments.bench.runner import run_bench

    synthetic_workload = _synthetic().synthetic_workload

    tmp = tmp_path_factory.mktemp("bench")
    opts = BenchOptions.quick_defaults(
        config=REPO / "configs/phase5.yaml",
        out=tmp / "results.json",
        work_dir=tmp,
        threads=1,  # two threads on a loaded 2-core machine can spin for seconds
        tuning_threads=(1,),
    )
    workload = synthetic_workload(tiny_lm, n_concepts=2, max_new_tokens=6)
    results = run_bench(opts, lm=tiny_lm, workload=workload)
    return opts, workload, results
