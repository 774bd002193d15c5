"""Criterion 4: each part's verdict is stored once and the combination recomputed."""

from __future__ import annotations

import json

from experiments import tracking
from experiments.record import RunRecord
from experiments.rundir import RunDir
from experiments.validation.criterion4 import record_criterion4, stored_verdict
from experiments.validation.runs import phase5_parent
from metrics.criteria import (
    C4,
    C4_HUMAN,
    C4_PANEL,
    V2_C4,
    V2_C4_HUMAN,
    V2_C4_PANEL,
    CriterionResult,
)


def verdict(key: str, status: str, value: float | None) -> CriterionResult:
    return CriterionResult(key, "test", status, value, 0.7, f"{status} for the test")


def test_verdicts_are_recombined_on_the_run_and_in_its_record(mlflow_store, tmp_path, kit):
    run_id, _ = kit.make_run(tmp_path)
    folder = phase5_parent(run_id).folder
    config = kit.run_config(tmp_path / "res")
    folder.write_record(
        RunRecord(
            run_id=run_id,
            experiment=kit.EXPERIMENT,
            config=config,
            model_id="tiny",
            layer=1,
            alpha=1.0,
            beta=0.2,
        )
    )

    combined = record_criterion4(run_id, human=verdict(C4_HUMAN, "panel_required", 0.3))
    assert combined.status == "panel_required"
    combined = record_criterion4(run_id, panel=verdict(C4_PANEL, "pass", 0.8))
    assert combined.status == "pass" and "from panel" in combined.reason
    tags = tracking.get_run(run_id).data.tags
    assert tags[f"criterion.{C4_HUMAN}"] == "panel_required"  # kept from the first call
    assert tags[f"criterion.{C4}"] == "pass"
    assert stored_verdict(tags, C4_PANEL) == verdict(C4_PANEL, "pass", 0.8)
    metrics = tracking.get_run(run_id).data.metrics
    assert metrics[f"criterion/{C4}"] == 1.0
    saved = json.loads(folder.file(RunDir.CRITERION4).read_text())
    assert set(saved) == {C4_HUMAN, C4_PANEL, C4, V2_C4}
    assert saved[V2_C4]["status"] == "pending"  # no v2 part recorded yet
    record = folder.read_record()
    assert record.criterion(C4) == combined
    assert record.criterion(C4_HUMAN).status == "panel_required"

    # Re-recording replaces: a human pass now decides.
    tracking.set_note(run_id, "## The answer (old)\n\nstale\n\n---\n\n# Phase 5 run x\n")
    combined = record_criterion4(run_id, human=verdict(C4_HUMAN, "pass", 0.9))
    assert combined.status == "pass" and "from human" in combined.reason
    assert folder.read_record().criterion(C4_HUMAN).value == 0.9
    # The answer follows: answer.md and the top of the description, the rest kept.
    answer = folder.file(RunDir.ANSWER).read_text(encoding="utf-8")
    assert "| c4_human | +0.900 | 0.7 | pass |" in answer
    note = tracking.get_run(run_id).data.tags[tracking.NOTE_TAG]
    assert note.startswith(answer) and "stale" not in note and note.endswith("# Phase 5 run x\n")


def test_an_untyped_record_is_left_alone(mlflow_store, tmp_path, kit):
    run_id, _ = kit.make_run(tmp_path)
    folder = phase5_parent(run_id).folder
    untyped = folder.file(RunDir.RECORD)
    untyped.write_text('{"run_id": "old"}')
    record_criterion4(run_id, human=verdict(C4_HUMAN, "inconclusive", 0.6))
    assert untyped.read_text() == '{"run_id": "old"}'
    assert json.loads(folder.file(RunDir.CRITERION4).read_text())[C4]["status"] == "inconclusive"


def test_v2_verdicts_combine_on_their_own_and_are_logged_beside_the_seed(
    mlflow_store, tmp_path, kit
):
    run_id, _ = kit.make_run(tmp_path)
    # Seed: the point r passes; v2: the interval straddles the bar, so inconclusive.
    seed = record_criterion4(
        run_id,
        human=verdict(C4_HUMAN, "pass", 0.75),
        human_v2=verdict(V2_C4_HUMAN, "inconclusive", 0.75),
    )
    assert seed.status == "pass"
    tags = tracking.get_run(run_id).data.tags
    assert tags[f"criterion.{V2_C4}"] == "inconclusive"
    # The panel's v2 pass decides v2 (human OR panel), the seed stays as it was.
    record_criterion4(run_id, panel_v2=verdict(V2_C4_PANEL, "pass", 0.85))
    run = tracking.get_run(run_id)
    assert run.data.tags[f"criterion.{V2_C4}"] == "pass"
    assert run.data.tags[f"criterion.{C4}"] == "pass"
    assert run.data.metrics[f"v2/criterion/{V2_C4}"] == 1.0
    assert run.data.metrics[f"criterion/{C4}"] == 1.0
    assert f"criterion/{V2_C4}" not in run.data.metrics  # v2 names only under v2/
    assert run.data.params[f"v2/criterion/{V2_C4_HUMAN}/threshold"] == "0.7"
