"""One --quick bench run on the tiny model, shared by the bench tests that read results."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="package")
def quick_results(tiny_lm, tmp_path_factory):
    """A --quick run of every section that applies to synthetic rows on the tiny model."""
    from experiments.bench.options import BenchOptions
    from experiments.bench.runner import run_bench
    from experiments.bench.workload import synthetic_workload

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
