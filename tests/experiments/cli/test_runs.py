"""``steer-eval runs`` and ``steer-eval ui``'s listing against a real MLflow store: every
kind of run (a Phase 5 run and a strength sweep here), each verdict's cell its status
then its observed value and interval to three significant digits, a corrected
correlation after the observed one, headers whole (issue 55, item 3)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from experiments import tracking
from experiments.answer import status_word, value_interval
from experiments.cli import app
from experiments.concepts import load_concepts
from experiments.phase5.run import run_phase5
from experiments.strength.publish import STRENGTH_EXPERIMENT
from experiments.strength.sweep import calibrate_strength
from experiments.tracking.listing import ListedVerdict, with_corrected
from metrics.intervals import Interval


@pytest.fixture(scope="module")
def store(tmp_path_factory, mlflow_store, tiny_lm, embedder, single_threaded, tiny_phase5_config):
    """A tiny Phase 5 run and a tiny strength sweep, in the session's tmp store."""
    tmp = tmp_path_factory.mktemp("runs")
    config = tiny_phase5_config(tmp)
    with single_threaded():
        result = run_phase5(config, lm=tiny_lm, embedder=embedder)
        graph = load_concepts(config.concepts.file, limit=2)
        sweep, _ = calibrate_strength(config, tiny_lm, graph, 2, [1e-4, 1e3])
    return config, result, sweep


def invoke(*args: str, width: int = 300) -> str:
    """The command's stdout, its tables as wide as ``width`` (wide: a cell on one line)."""
    from experiments.cli.common import out as console

    before = console.width
    console.width = width
    try:
        result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    finally:
        console.width = before
    assert result.exit_code == 0, result.output
    return result.stdout


def test_every_kind_of_run_is_listed_the_sweep_with_what_it_found(store):
    config, result, sweep = store
    listed = {r["run_id"]: r for r in json.loads(invoke("runs", "--json"))["runs"]}
    phase5, strength = listed[result.run_id], listed[sweep.run_id]
    assert phase5["experiment"] == config.tracking.experiment
    assert (strength["experiment"], strength["phase"]) == (STRENGTH_EXPERIMENT, "strength")
    assert strength["note"].startswith(sweep.describe())  # the answer's first note
    table = invoke("runs", "-e", STRENGTH_EXPERIMENT)
    assert sweep.run_id in table
    assert "".join(sweep.describe().split()) in "".join(table.split())


def test_a_cell_is_the_status_then_the_value_and_interval(store):
    config, result, _ = store
    narrow = invoke("runs", "-e", config.tracking.experiment, width=80)
    for header in (result.run_id, "criterion", "s > 0", "s < 0", "both signs"):
        assert header in narrow  # whole, not cut, in 80 columns too
    assert "…" not in narrow  # cells fold, never cut
    table = invoke("runs", "-e", config.tracking.experiment)
    for key in ("v2_effect_above_null_pos", "v2_direction_neg", "v2_predictor_vs_effect_pos"):
        c = result.record.criteria[key]
        interval = result.record.statistics.intervals[key]
        shown = value_interval(c.value, interval.low, interval.high)
        assert status_word(c.status) in table
        if shown:  # e.g. "+0.412 [+0.210, +0.600]": three significant digits
            assert shown in table
            number = shown.split()[0]
            digits = number.lstrip("+-").replace(".", "").lstrip("0")
            assert len(digits) == 3 or "e" in number or c.value == 0
    run = tracking.get_run(result.run_id)
    corrected = "correlation/predictor_vs_effect_pos/corrected"
    if corrected in run.data.metrics:  # the corrected r follows the observed one
        label = "predictor → effect above null (r)"
        at = table.index(label)
        assert table.index(f"{label}, corrected", at + 1) > at


def test_a_corrected_correlation_follows_the_verdict_it_corrects():
    verdicts = [
        ListedVerdict("v2_predictor_vs_effect_pos", "s > 0", "r", "fail", Interval(0.2, -0.1, 0.5)),
        ListedVerdict(
            "v2_effect_above_null_pos", "s > 0", "above", "pass", Interval(0.3, 0.1, 0.4)
        ),
        ListedVerdict("v2_predictor_vs_effect_neg", "s < 0", "r", "fail", Interval(0.1, -0.2, 0.4)),
    ]
    metrics = {
        "correlation/predictor_vs_effect_pos/corrected": 0.31234,
        "correlation/predictor_vs_effect_pos/corrected/low": -0.1,
        "correlation/predictor_vs_effect_pos/corrected/high": 0.7,
    }
    out = with_corrected(verdicts, metrics)
    assert [v.key for v in out] == [
        "v2_predictor_vs_effect_pos",
        "v2_predictor_vs_effect_pos_corrected",
        "v2_effect_above_null_pos",
        "v2_predictor_vs_effect_neg",  # no corrected r logged for s < 0
    ]
    assert out[1].label == "r, corrected for unreliability (can exceed 1)"
    assert out[1].group == "s > 0"
    corrected = out[1].interval
    assert value_interval(corrected.estimate, corrected.low, corrected.high) == (
        "+0.312 [-0.100, +0.700]"
    )


def test_ui_lists_every_experiment_with_its_newest_run(store):
    from experiments.cli.ui import addresses

    config, result, sweep = store
    found = dict(addresses())
    phase5 = f"newest Phase 5 run ({config.tracking.experiment}), on its answer"
    strength = (
        f"newest strength sweep (calibrate-strength) run ({STRENGTH_EXPERIMENT}), on its answer"
    )
    assert found[phase5] == tracking.run_ui_url(result.run_id)
    assert found[strength] == tracking.run_ui_url(sweep.run_id)
    assert f"{STRENGTH_EXPERIMENT} runs" in found
