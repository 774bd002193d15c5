"""experiments.record: which classifier quality a run record hands to criterion 3."""

from __future__ import annotations

import pytest

from experiments.config import load_config
from experiments.record import RunRecord, predictor_values


def record(predictors: dict, *overrides: str) -> RunRecord:
    return RunRecord(
        run_id="r",
        experiment="e",
        config=load_config("configs/phase5.yaml", list(overrides)),
        model_id="m",
        layer=9,
        alpha=1.0,
        beta=0.2,
        predictors=predictors,
    )


PREDICTORS = {
    "a": {"auroc": 0.9, "ap": 0.8, "f1_raw": 0.1, "f1_calibrated": 0.7},
    "b": {"auroc": 0.6, "ap": None, "f1_raw": 0.0, "f1_calibrated": 0.5},
}


def test_the_configured_predictor_is_used_and_missing_values_are_left_out():
    assert record(PREDICTORS).predictor() == {"a": 0.7, "b": 0.5}
    assert record(PREDICTORS, "criteria.predictor=auroc").predictor() == {"a": 0.9, "b": 0.6}
    assert record(PREDICTORS).predictor("ap") == {"a": 0.8}


def test_first_release_records_give_their_raw_f1_and_nothing_calibrated():
    legacy = {"a": {"f1": 0.25, "auroc": 0.7}}
    assert predictor_values(legacy, "f1_raw") == {"a": 0.25}
    assert predictor_values(legacy, "f1_calibrated") == {}


def test_a_record_round_trips_with_diagnostics():
    rec = record(PREDICTORS)
    rec.diagnostics = {"directions": {"mean_pairwise_cosine": 0.05}}
    again = RunRecord.parse(rec.model_dump_json())
    assert again.diagnostics == rec.diagnostics
    assert again.predictor() == pytest.approx(rec.predictor())
