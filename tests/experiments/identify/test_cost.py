"""identify's cost model: stage costs per concept from a finished run, the shard size a
budget holds, and where the dry run takes them from."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from experiments.identify.heldout.cost import (
    cost_lines,
    costs_from_record,
    costs_from_timings,
    plan_costs,
    read_bench,
)

TIMINGS = {"model_load": 30.0, "directions": 200.0, "likelihood": 1000.0, "child_runs": 30.0,
           "total": 1260.0}  # fmt: skip


def test_stage_costs_are_per_concept_but_for_the_stages_paid_once():
    costs = costs_from_timings(TIMINGS, 10, "run r")
    assert costs.per_concept == {"directions": 20.0, "likelihood": 100.0}
    assert costs.fixed == {"model_load": 30.0, "child_runs": 30.0}  # "total" is no stage
    assert costs.seconds(10) == pytest.approx(1260.0)
    # 150 min: (9000 - 60) / 120 = 74.5 concepts
    assert costs.shard_size(150) == 74 and costs.seconds(74) <= 150 * 60 < costs.seconds(75)
    assert costs.shard_size(0.5) == 0
    lines = cost_lines(costs, "", 150)
    assert "likelihood 100.0 s" in lines[0] and "74 concepts" in lines[1]


def test_costs_are_read_from_a_finished_runs_record(tmp_path):
    record = {"model_id": "m", "timings": TIMINGS,
              "config": {"concepts": {"synsets": [f"c{i}.n.01" for i in range(10)]}}}  # fmt: skip
    (tmp_path / "analysis.json").write_text(json.dumps(record))
    costs = costs_from_record(tmp_path, "cpu/float32")
    assert costs.n_concepts == 10 and costs.per_concept["likelihood"] == 100.0
    assert (costs.model_id, costs.device) == ("m", "cpu/float32")


def test_the_dry_run_falls_back_on_the_bench_file_of_the_same_model_and_device(tmp_path):
    bench = tmp_path / "costs.json"
    plan = SimpleNamespace(
        estimate=None,
        model=SimpleNamespace(
            model_id="m", dtype_name="float32", device=SimpleNamespace(type="cpu")
        ),
    )
    found, why = plan_costs(plan, bench)
    assert found is None and "not measured yet" in why
    data = costs_from_timings(TIMINGS, 10, "run r", "m", "cpu/float32").to_dict()
    bench.write_text(json.dumps(data))
    found, why = plan_costs(plan, bench)
    assert found is not None and found.shard_size(150) == 74 and why == ""
    bench.write_text(json.dumps({**data, "device": "cuda/bfloat16"}))
    found, why = plan_costs(plan, bench)
    assert found is None and "cuda/bfloat16" in why


def test_a_sibling_bench_file_serves_its_own_model(tmp_path):
    """``costs-<model>.json`` beside ``costs.json``: each model's dry run finds its own."""
    bench = tmp_path / "costs.json"
    plan = SimpleNamespace(
        estimate=None,
        model=SimpleNamespace(
            model_id="small", dtype_name="float32", device=SimpleNamespace(type="cpu")
        ),
    )
    data = costs_from_timings(TIMINGS, 10, "run r", "m", "cpu/float32").to_dict()
    bench.write_text(json.dumps(data))
    found, why = plan_costs(plan, bench)
    assert found is None and "m (cpu/float32)" in why and "not small" in why
    sibling = costs_from_timings(TIMINGS, 5, "run s", "small", "cpu/float32").to_dict()
    (tmp_path / "costs-small.json").write_text(json.dumps(sibling))
    found, why = plan_costs(plan, bench)
    assert found is not None and found.model_id == "small" and found.n_concepts == 5


def test_the_committed_bench_file_reads_or_says_it_is_not_measured():
    found = read_bench()
    assert found is None or found.concept_seconds > 0


def test_per_direction_stages_scale_to_the_planned_grid(tmp_path):
    """A run of 10 concepts × 3 directions read from its folder; a plan of 6 directions
    per concept pays twice its per-direction stages and the same for the rest."""
    record = {"model_id": "m", "timings": TIMINGS,
              "config": {"concepts": {"synsets": [f"c{i}.n.01" for i in range(10)]}}}  # fmt: skip
    (tmp_path / "analysis.json").write_text(json.dumps(record))
    rows = [f"c{i}.n.01,d{j}" for i in range(10) for j in range(3)]
    (tmp_path / "directions.csv").write_text("concept,direction\n" + "\n".join(rows) + "\n")
    costs = costs_from_record(tmp_path, "cpu/float32")
    assert costs.directions == 3
    wider = costs.for_grid(6)
    assert wider.per_concept == {"directions": 40.0, "likelihood": 200.0}
    assert wider.fixed == costs.fixed and wider.scaled_from == 3
    assert costs.for_grid(3) is costs  # the same grid: as measured
    assert "scaled from 3 to 6 directions per concept" in cost_lines(wider, "", 150)[0]
    # a bench file carries its grid; without one nothing is scaled
    bench = tmp_path / "costs.json"
    bench.write_text(json.dumps(costs.to_dict()))
    plan = SimpleNamespace(
        estimate=None,
        model=SimpleNamespace(
            model_id="m", dtype_name="float32", device=SimpleNamespace(type="cpu")
        ),
    )
    found, _ = plan_costs(plan, bench, directions=6)
    assert found is not None and found.per_concept["likelihood"] == 200.0
    unknown = costs_from_timings(TIMINGS, 10, "run r")
    assert unknown.for_grid(6) is unknown
