"""experiments.record: which classifier quality a run record hands to criterion 3, and
the typed statistics reading and writing back what the untyped record wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.config import load_config
from experiments.record import LayerChoice, RunRecord, RunStatistics, predictor_values
from experiments.record.phase5 import CriterionInterval
from metrics.intervals import Interval

# A Phase 5 record (a tiny run with the likelihood outcome) written by
# phase5/publish.build_record while its statistics were an untyped dict.
UNTYPED = Path(__file__).with_name("record_v4_untyped_statistics.json")


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


def _exactly(value: object) -> object:
    """Parsed JSON with its keys' order and each leaf's type kept, for ==
    (where 1 == 1.0 == True and {"a", "b"} == {"b", "a"})."""
    if isinstance(value, dict):
        return [(k, _exactly(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_exactly(v) for v in value]
    return (type(value).__name__, value)


def test_a_version_4_record_reads_typed_and_its_effect_summaries_migrate():
    text = UNTYPED.read_text()
    stored = json.loads(text)["statistics"]
    rec = RunRecord.parse(text)
    assert isinstance(rec.statistics, RunStatistics)
    intervals = rec.statistics.intervals
    assert intervals["v2_direction_pos"] == CriterionInterval(
        **stored["intervals"]["v2_direction_pos"]
    )
    # a correlation's Spearman interval, typed beside it
    spearman = intervals["v2_predictor_vs_effect_pos"].spearman
    assert spearman is not None
    assert (
        spearman.estimate
        == stored["intervals"]["v2_predictor_vs_effect_pos"]["spearman"]["estimate"]
    )
    # version 4's loose numbers per arm and sign: each outcome an Interval now
    for name, row in stored["effect"].items():
        if name.startswith("above_null"):
            null = rec.statistics.above_null[name]
            assert null.n == row["n"]
            assert null.ungated.ends() == (row["ungated_mean"], row["ungated_low"],
                                           row["ungated_high"])  # fmt: skip
            assert (null.gated is None) is name.startswith("above_null_other")
            continue
        arm = rec.statistics.effect[name]
        assert arm.n == row["n"] and arm.gate_pass_fraction == row["gate_pass_fraction"]
        for outcome in ("e", "e_gated", "combined"):
            interval = arm.outcomes[outcome]
            ends = [row[f"{outcome}_{k}"] for k in ("mean", "low", "high")]
            assert [interval.estimate, interval.low, interval.high] == ends
        assert arm.gated_reason == row.get("gated_reason", "")
        assert arm.outcomes["e_gated"].reason == row.get("gated_reason", "")
    assert rec.statistics.f1_vs_magnitude["evaluable"] is True
    measurement = rec.statistics.measurement
    assert measurement is not None
    # version 4's likelihood rows: the mean and the concept arm above it, as Intervals
    for row, typed in zip(stored["measurement"]["likelihood"], measurement.likelihood, strict=True):
        assert (typed.family, typed.sign, typed.n_concepts) == (row["family"], row["sign"],
                                                                row["n_concepts"])  # fmt: skip
        assert typed.mean.ends() == (row["mean"], row["low"], row["high"])
        assert (typed.above.ends() if typed.above else None) == (
            (row["above"], row["above_low"], row["above_high"]) if "above" in row else None
        )
    fit = measurement.likelihood_vs_effect_by_direction["pos"]
    by = stored["measurement"]["likelihood_vs_effect_by_direction"]["pos"]
    assert fit.r.ends() == (by["r"], by["ci_low"], by["ci_high"])
    assert (fit.r.n, fit.p_value) == (by["n_directions"], by["p_value"])
    gap = measurement.reference_gap
    assert gap is not None and gap.gap.estimate == stored["measurement"]["reference_gap"]["mean"]
    stored_rel = stored["measurement"]["reliability"]
    assert {k: r.estimate for k, r in measurement.reliability.items()} == {
        k: r["estimate"] for k, r in stored_rel.items()
    }
    # written as version 5, it reads back the same and writes the same JSON again
    written = rec.model_dump_json(indent=1)
    assert json.loads(written)["version"] == 5
    again = RunRecord.parse(written)
    assert again.statistics == rec.statistics
    assert _exactly(json.loads(again.model_dump_json(indent=1))) == _exactly(json.loads(written))
    # the other blocks are written back as version 4 wrote them
    statistics = json.loads(written)["statistics"]
    for block in ("f1_vs_magnitude", "intervals", "slopes"):
        assert _exactly(statistics[block]) == _exactly(stored[block])


def test_a_version_4_layer_table_reads_its_loose_ends_as_one_interval():
    rows = {
        "4": {"auroc": 0.8, "beta": 0.2, "effect": 0.01, "low": -0.04, "high": 0.06,
              "effect_pos": 0.02, "effect_neg": 0.0, "texts": 15, "gate_pass": 0.9, "reason": ""},
        "9": {"auroc": 0.9, "beta": 0.2, "effect": None, "low": None, "high": None,
              "effect_pos": None, "effect_neg": None, "texts": 15, "gate_pass": 0.0,
              "reason": "every steered text at this layer was gated (15/15)"},
        "11": {"auroc": 0.7, "beta": None, "effect": None, "low": None, "high": None,
               "effect_pos": None, "effect_neg": None, "texts": None, "gate_pass": None,
               "reason": ""},
    }  # fmt: skip
    choice = LayerChoice(rule="auto-effect", optimises="the effect", layer=4, layers=rows)
    assert choice.layers["4"].effect == Interval(0.01, -0.04, 0.06)
    assert choice.layers["4"].low == -0.04 and choice.layers["4"].effect_pos == 0.02
    gated = choice.layers["9"].effect
    assert gated is not None and not gated.evaluable and gated.reason.startswith("every")
    assert choice.layers["11"].effect is None  # the auto rule measured no effect there
    assert LayerChoice.model_validate_json(choice.model_dump_json()) == choice


def test_statistics_without_a_measurement_leave_it_out_and_older_records_read():
    rec = record(PREDICTORS)
    rec.statistics = RunStatistics(
        f1_vs_magnitude={"evaluable": False, "n": 2, "r": None, "reason": "2 concepts"},
        effect={"concept/pos": {"n": 4.0, "e_mean": 0.5, "gated_reason": "all gated"}},
        slopes={"a.n.01": 0.25},
    )
    arm = rec.statistics.effect["concept/pos"]  # a version-4 summary, migrated
    assert arm.outcomes["e"].estimate == 0.5 and arm.outcomes["e_gated"].reason == "all gated"
    written = json.loads(rec.model_dump_json())["statistics"]
    assert list(written) == ["f1_vs_magnitude", "effect", "above_null", "intervals", "slopes"]
    assert _exactly(written["f1_vs_magnitude"]) == _exactly(
        {"evaluable": False, "n": 2, "r": None, "reason": "2 concepts"}
    )
    assert RunRecord.parse(rec.model_dump_json()).statistics == rec.statistics
    # version 2 wrote only f1_vs_magnitude: a rescore reads it with the rest empty
    old = {**json.loads(rec.model_dump_json()), "version": 2}
    old["statistics"] = {"f1_vs_magnitude": {"evaluable": False}}
    migrated = RunRecord.parse(json.dumps(old), migrate=True)
    assert migrated.statistics.effect == {} and migrated.statistics.measurement is None
    with pytest.raises(ValueError, match="statistics"):
        RunRecord.parse(json.dumps({**old, "version": 4, "statistics": {"typo": {}}}))
