"""The answer block (experiments.phase5.answer): built from the record alone, generic
over the v2 criteria, the seed's criteria below them."""

from __future__ import annotations

import csv
import io
import json

from experiments.answer import (
    END_MARK,
    Verdict,
    answer_markdown,
    criteria_csv,
    reading,
    status_word,
    with_answer,
)
from experiments.config import load_config
from experiments.phase5.answer import SEED_LABEL, answer_of
from experiments.record import ArmEffect, CriterionRecord, RunRecord
from experiments.record.phase5 import CriterionInterval
from metrics.intervals import Interval


def criterion(key: str, status: str, value: float | None, threshold: float) -> CriterionRecord:
    return CriterionRecord(
        key=key,
        description=f"about {key}",
        status=status,
        value=value,
        threshold=threshold,
        reason=f"why {key}",
    )


def record(extra: dict[str, CriterionRecord] | None = None) -> RunRecord:
    criteria = {
        "c1_direction": criterion("c1_direction", "fail", 0.4, 0.8),
        "c3_f1_correlation": criterion("c3_f1_correlation", "pass", 0.65, 0.5),
        "v2_direction_pos": criterion("v2_direction_pos", "fail", 0.2, 0.8),
        "v2_effect_above_null_neg": criterion("v2_effect_above_null_neg", "pass", 0.3, 0.15),
        "v2_predictor_vs_effect_pos": criterion(
            "v2_predictor_vs_effect_pos", "inconclusive", -0.3, 0.5
        ),
        "v2_effect_above_null_pos": criterion("v2_effect_above_null_pos", "fail", -0.06, 0.15),
        "v2_c4_human_or_panel": criterion("v2_c4_human_or_panel", "pending", None, 0.7),
        **(extra or {}),
    }
    intervals = {
        "v2_direction_pos": {"low": 0.06, "high": 0.55, "n": 9, "method": "Wilson"},
        "v2_effect_above_null_pos": {"low": -0.14, "high": -0.001, "n": 27, "n_clusters": 9},
        "v2_effect_above_null_neg": {"low": 0.2, "high": 0.4, "n": 27, "n_clusters": 9},
        "v2_predictor_vs_effect_pos": {
            "low": -1.0,
            "high": 1.0,
            "n": 3,
            "method": "pearson r, bootstrap over concepts",
        },
    }
    return RunRecord(
        run_id="abc",
        experiment="e",
        config=load_config("configs/phase5.yaml"),
        model_id="tiny",
        layer=2,
        alpha=1.0,
        beta=0.2,
        predictors={"a": {"f1_calibrated": 0.7}, "b": {"f1_calibrated": 0.5}},
        per_concept={"a": {}, "b": {}, "c": {}},
        criteria=criteria,
        statistics={"intervals": intervals},
    )


def test_every_v2_criterion_is_listed_per_sign_with_its_interval_the_question_first():
    answer = answer_of(record())
    keys = [v.key for v in answer.verdicts]
    assert keys == [
        "v2_predictor_vs_effect_pos",
        "v2_effect_above_null_pos",
        "v2_direction_pos",
        "v2_effect_above_null_neg",
        "v2_c4_human_or_panel",
    ]
    first = answer.verdicts[0]
    assert (first.sign, first.value, first.low, first.high) == ("pos", -0.3, -1.0, 1.0)
    assert (first.status, first.threshold, first.n) == ("inconclusive", 0.5, 3)
    c4 = answer.verdicts[-1]
    assert (c4.sign, c4.low, c4.high) == ("both", None, None)
    assert [v.key for v in answer.seed] == ["c1_direction", "c3_f1_correlation"]
    assert "f1_calibrated" in answer.question and "3 concepts" in answer.question


def test_a_criterion_added_later_shows_up_without_a_code_change():
    extra = {"v2_reliability_neg": criterion("v2_reliability_neg", "pass", 0.9, 0.7)}
    answer = answer_of(record(extra))
    added = next(v for v in answer.verdicts if v.key == "v2_reliability_neg")
    assert (added.sign, added.label, added.status) == ("neg", "reliability", "pass")
    assert "reliability" in answer_markdown(answer)
    assert answer.to_dict()["criteria"]["v2_reliability_neg"]["value"] == 0.9


def test_headlines_say_the_verdict_with_value_and_interval_per_sign_in_the_tables_words():
    answer = answer_of(record())
    headlines = answer.headlines()
    assert set(headlines) == {"s > 0", "s < 0"}
    pos = headlines["s > 0"]
    assert "inconclusive (r = -0.300 [-1.000, +1.000] over 3 concepts" in pos
    assert "fail (-0.060 [-0.140, -0.001] over 9 concepts, interval below 0.15)" in pos
    assert "pass (" in headlines["s < 0"]
    text = answer_markdown(answer)
    for v in answer.verdicts:  # the headline's word is the table's word
        if v.claim:
            word = status_word(v.status)
            assert f"{v.claim}: {word}" in text and f"**{word}**" in text


def test_an_interval_above_0_but_below_the_threshold_reads_real_below_the_threshold():
    extra = {"v2_effect_above_null_pos": criterion("v2_effect_above_null_pos", "fail", 0.066, 0.15)}
    r = record(extra)
    r.statistics.intervals["v2_effect_above_null_pos"] = CriterionInterval(
        low=0.004, high=0.14, n=27, n_clusters=9
    )
    v = next(v for v in answer_of(r).verdicts if v.key == "v2_effect_above_null_pos")
    assert reading(v) == "real (interval above 0), short of the threshold 0.15"
    assert (
        "fail (+0.066 [+0.004, +0.140] over 9 concepts, real" in answer_of(r).headlines()["s > 0"]
    )


def test_the_prompting_baseline_is_a_row_when_it_ran():
    r = record()
    assert not [v for v in answer_of(r).verdicts if v.key.startswith("prompt_baseline")]
    measured = Interval(0.4, 0.3, 0.5)
    r.statistics.effect = {
        "prompt/pos": ArmEffect(n=30, outcomes={"e_gated": measured},
                                gate_pass_fraction=1.0, direction_fraction=1.0)
    }  # fmt: skip
    row = next(v for v in answer_of(r).verdicts if v.key == "prompt_baseline_pos")
    assert (row.value, row.low, row.high, row.status, row.n) == (0.4, 0.3, 0.5, "pass", 30)


def test_criteria_csv_has_value_low_high_status_and_neutralises_formulas():
    answer = answer_of(record())
    rows = list(csv.DictReader(io.StringIO(criteria_csv(answer))))
    got = next(r for r in rows if r["key"] == "v2_effect_above_null_pos")
    assert (got["value"], got["low"], got["high"], got["status"]) == (
        "-0.06", "-0.14", "-0.001", "fail",
    )  # fmt: skip
    assert {r["key"] for r in rows} >= {"c1_direction", "c3_f1_correlation"}
    evil = Verdict("k", "=HYPERLINK(1)", "g", Interval(1.0, reason="@x"), "pass", 0.0)
    answer.verdicts.append(evil)
    row = next(r for r in csv.DictReader(io.StringIO(criteria_csv(answer))) if r["key"] == "k")
    assert row["label"] == "'=HYPERLINK(1)" and row["reason"] == "'@x"


def test_json_fields_are_structured_per_criterion():
    data = answer_of(record()).to_dict()
    got = data["criteria"]["v2_effect_above_null_pos"]
    assert {k: got[k] for k in ("value", "low", "high", "status", "threshold")} == {
        "value": -0.06,
        "low": -0.14,
        "high": -0.001,
        "status": "fail",
        "threshold": 0.15,
    }
    assert set(data["seed_criteria"]) == {"c1_direction", "c3_f1_correlation"}
    assert data["phase"] == "phase5" and "**" not in json.dumps(data)  # plain text


def test_markdown_puts_v2_first_and_the_seed_below_labelled_as_the_original_design():
    text = answer_markdown(answer_of(record(), ("effect_forest.png",)))
    assert text.startswith("## The answer (run `abc`)")
    assert text.index("| criterion |") < text.index(SEED_LABEL) < text.index("c1_direction")
    assert "| s > 0 | effect above null (gated) | -0.060 | [-0.140, -0.001] | 0.15 |" in text
    assert "[effect_forest.png](effect_forest.png)" in text and text.endswith(END_MARK)


def test_with_answer_replaces_only_the_leading_block():
    old = answer_markdown(answer_of(record()))
    new = answer_markdown(answer_of(record({"v2_x": criterion("v2_x", "pass", 1.0, 0.5)})))
    note = with_answer(old + "\n> classifiers\n\n# Phase 5 run abc\n", new)
    assert note.startswith(new) and note.count("## The answer") == 1
    assert note.endswith("# Phase 5 run abc\n")
    assert with_answer("", new).startswith(new)
