"""Honest on little data: a sign whose every steered text the coherence gate failed is
not evaluable, with its reason, in every view (the answer's terminal block, answer.md,
criteria.csv, --json, the MLflow metrics and tags, the figures, the runs table); and
concepts whose texts were all gated out are drawn as not measured.

Records are built as a run writes them (``row``), scored by the real effect stage and
put in a real :class:`RunRecord`, as ``phase5/publish.build_record`` does."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from experiments.answer import answer_markdown, criteria_csv, reading
from experiments.config import load_config
from experiments.kernel.effect import evaluate_effect
from experiments.phase5.answer import answer_of
from experiments.phase5.per_concept import concept_intervals
from experiments.phase5.publish import reason_tags, record_metrics
from experiments.record import CriterionRecord, Measurement, RunRecord, RunStatistics
from experiments.tracking.listing import parse_criteria
from metrics.intervals import Interval, not_evaluable
from metrics.reliability import Disattenuated, Reliability

CONFIG = load_config("configs/phase5.yaml", ["criteria.n_boot=200"])
CONCEPTS = [f"c{i}" for i in range(5)]
PROMPTS = 4
N_POS = len(CONCEPTS) * PROMPTS
REASON = f"every steered text at s > 0 was gated ({N_POS}/{N_POS})"


def row(concept, prompt, strength, delta, arm="concept", **extra):
    key = f"{concept}|p{prompt}|n0|s{strength:+.3f}" + (
        f"|{arm}" if strength and arm != "concept" else ""
    )
    return {
        "key": key,
        "concept": concept,
        "prompt_index": prompt,
        "sample": 0,
        "strength": float(strength),
        "arm": arm,
        "split": "report",
        "beta": 0.2,
        "delta": float(delta),
        "perplexity": 10.0,
        "near_empty": False,
        "is_echo": False,
        **extra,
    }


def records(hollow_pos: set[str]) -> pd.DataFrame:
    """Five concepts, four prompts, one random arm. At s < 0 every concept moves clearly;
    at s > 0 the concepts in ``hollow_pos`` break the model (near-empty texts, gated out)
    while their random directions do not (a null of about -0.05)."""
    rng = np.random.default_rng(0)
    rows = []
    for i, c in enumerate(CONCEPTS):
        for p in range(PROMPTS):
            strong = 0.3 + 0.05 * i + 0.01 * rng.normal()
            rows += [
                row(c, p, 0.0, 0.0),
                row(c, p, 1.0, strong, near_empty=c in hollow_pos),
                row(c, p, -1.0, -strong),
                row(c, p, 1.0, -0.05 + 0.01 * rng.normal(), arm="random:0"),
                row(c, p, -1.0, 0.01 * rng.normal(), arm="random:0"),
            ]
    return pd.DataFrame(rows)


def run_record(
    frame: pd.DataFrame, vector_source: str = "classifier", vector_file: str = ""
) -> RunRecord:
    predictor = {c: 0.5 + 0.1 * i for i, c in enumerate(CONCEPTS)}
    effect = evaluate_effect(frame, predictor, CONFIG)
    per_concept = {c: dict(v) for c, v in effect.per_concept.items()}
    for c, v in concept_intervals(frame, CONFIG).items():
        per_concept.setdefault(c, {}).update(v)
    overrides = [f"steering.vector_source={vector_source}"]
    if vector_file:
        overrides.append(f"steering.vector_file={vector_file}")
    config = load_config("configs/phase5.yaml", ["criteria.n_boot=200", *overrides])
    return RunRecord(
        run_id="little",
        experiment="e",
        config=config,
        model_id="tiny",
        layer=2,
        alpha=1.0,
        beta=0.2,
        predictors={c: {"f1_calibrated": v} for c, v in predictor.items()},
        per_concept=per_concept,
        criteria={k: CriterionRecord.of(v) for k, v in effect.criteria.items()},
        statistics=RunStatistics(
            intervals=effect.intervals, effect=effect.summary, above_null=effect.above
        ),
    )


GATED_KEYS = ("v2_effect_above_null_pos", "v2_direction_pos", "v2_predictor_vs_effect_pos")


@pytest.fixture(scope="module")
def all_gated() -> RunRecord:
    return run_record(records(set(CONCEPTS)))


def test_a_sign_whose_every_text_was_gated_is_not_evaluable_with_its_reason(all_gated):
    for key in GATED_KEYS:
        c = all_gated.criteria[key]
        assert (c.status, c.value, c.reason) == ("not_evaluable", None, REASON), key
        interval = all_gated.statistics.intervals[key]
        assert interval.low is None and interval.high is None
    # The other sign is measured as before.
    assert all_gated.criteria["v2_effect_above_null_neg"].status == "pass"
    # The stored effect says why instead of a gated effect of 0 [0, 0].
    arm = all_gated.statistics.effect["concept/pos"]
    assert arm.outcomes["e_gated"].estimate is None and arm.gated_reason == REASON
    null = all_gated.statistics.above_null["above_null/pos"].gated
    assert null is not None and null.estimate is None and null.reason == REASON


def test_every_view_of_the_answer_says_not_evaluable_and_why(all_gated):
    answer = answer_of(all_gated)
    pos = answer.headlines()["s > 0"]
    assert "fail" not in pos and "+0.000" not in pos
    assert f"the predictor predicts the effect: not evaluable ({REASON})" in pos
    text = answer_markdown(answer)
    assert f"| **not evaluable** | {REASON} |" in text and "[+0.000, +0.000]" not in text
    shown = {v["key"]: v for v in answer.to_dict()["criteria"].values()}  # --json
    for key in GATED_KEYS:
        assert shown[key]["status"] == "not_evaluable" and shown[key]["reason"] == REASON
        assert shown[key]["reading"] == REASON and shown[key]["value"] is None
    listed = {v.key: v for v in parse_criteria(criteria_csv(answer))}  # criteria.csv, runs
    for key in GATED_KEYS:
        assert (listed[key].status, listed[key].interval.estimate, listed[key].interval.reason) == (
            "not_evaluable",
            None,
            REASON,
        )
    assert listed["v2_effect_above_null_neg"].reading.startswith("interval above")
    v = next(v for v in answer.verdicts if v.key == "v2_effect_above_null_pos")
    assert reading(v) == REASON


def test_the_terminal_and_the_runs_table_say_it_too(all_gated):
    from experiments.cli import answer as cli_answer
    from experiments.cli import common
    from experiments.cli.runs import _status, unjudged

    answer = answer_of(all_gated)
    buffer = io.StringIO()
    console, common.out = common.out, Console(file=buffer, width=400, color_system=None)
    try:
        cli_answer.out = common.out
        cli_answer.print_answer(answer)
    finally:
        common.out = cli_answer.out = console
    printed = buffer.getvalue()
    assert f"not evaluable ({REASON})" in printed and "not_evaluable" not in printed
    listed = {v.key: v for v in parse_criteria(criteria_csv(answer))}
    assert "not evaluable" in _status(listed["v2_effect_above_null_pos"])
    assert "pass" in _status(listed["v2_effect_above_null_neg"])
    why = unjudged("little-run", listed.values())
    assert f"little-r · effect above null (gated) · s > 0: {REASON}" in why
    assert not any("effect above null (gated) · s < 0" in line for line in why)


def test_mlflow_logs_no_verdict_metric_for_it_and_tags_the_reason(all_gated):
    metrics = record_metrics(all_gated)
    for key in GATED_KEYS:
        for suffix in ("", "/value", "/low", "/high"):
            assert metrics[f"v2/criterion/{key}{suffix}"] is None  # skipped, never logged
        assert reason_tags(all_gated)[f"criterion.{key}.reason"] == REASON
    assert metrics["effect/concept/pos/e_gated_mean"] is None
    assert metrics["effect/above_null/pos/gated_mean"] is None
    assert metrics["v2/criterion/v2_effect_above_null_neg"] == 1.0


def test_the_figures_title_says_not_evaluable_and_why(all_gated):
    import matplotlib.pyplot as plt

    from experiments.phase5.figures import predictor_effect_figure

    fig = predictor_effect_figure(all_gated, {})
    titles = [ax.get_title() for ax in fig.axes]
    assert any(f"not evaluable ({REASON})" in t for t in titles), titles
    assert not any("fail" in t for t in titles if t.startswith("s > 0"))
    plt.close(fig)


# ------------------------------------------------- concepts whose every text was gated out


def _points(ax) -> list[tuple[float, float, bool, bool]]:
    """Each drawn concept as (x, y, hollow, has an interval along the effect's axis)."""
    out = []
    for container in ax.containers:
        line = container.lines[0]
        hollow = line.get_markerfacecolor() == "none"
        x, y = float(line.get_xdata()[0]), float(line.get_ydata()[0])
        out.append((x, y, hollow, container.has_yerr or container.has_xerr))
    return out


@pytest.fixture(scope="module")
def two_hollow() -> RunRecord:
    return run_record(records({"c0", "c1"}))


def test_hollow_concepts_are_drawn_as_not_measured_and_counted(two_hollow):
    import matplotlib.pyplot as plt

    from experiments.phase5.figures import HOLLOW_LEGEND, predictor_effect_figure

    # The hollow concepts' effect above null is 0 minus the null, about +0.05: a number
    # the figure must not show as if measured.
    assert two_hollow.per_concept["c0"]["above_null_pos"] > 0.03
    fig = predictor_effect_figure(two_hollow, {})
    pos = fig.axes[0]
    assert pos.get_title().startswith("s > 0")
    drawn = [(round(x, 3), y, hollow, yerr) for x, y, hollow, yerr in _points(pos)]
    hollow = [d for d in drawn if d[2]]
    assert len(drawn) == 5 and len(hollow) == 2
    for x, y, _hollow, has_interval in hollow:
        assert y == 0.0 and not has_interval and x in (0.5, 0.6)
    assert "5 concepts, 2/5 all gated out" in pos.get_title()
    assert "0/5 all gated out" in fig.axes[1].get_title()
    legend = [t.get_text() for t in pos.get_legend().get_texts()]
    assert HOLLOW_LEGEND in legend
    note = fig._suptitle.get_text()
    assert "not measured" in note and "0 by the gate" not in note
    plt.close(fig)


def test_the_forest_draws_hollow_concepts_at_zero_and_counts_them(two_hollow):
    import matplotlib.pyplot as plt

    from experiments.phase5.figures import HOLLOW_LEGEND, forest_figure

    fig = forest_figure(two_hollow, {})
    ax = fig.axes[0]
    hollow = [p for p in _points(ax) if p[2]]
    assert len(hollow) == 2 and all(x == 0.0 and not err for x, _y, _h, err in hollow)
    assert "s > 0: 5 concepts, 2/5 all gated out" in ax.get_title()
    assert "s < 0: 5 concepts, 0/5 all gated out" in ax.get_title()
    assert HOLLOW_LEGEND in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)


def test_the_answer_note_says_what_enters_r(two_hollow):
    note = next(n for n in answer_of(two_hollow).notes if "coherence gate" in n)
    assert "c0 (4/4), c1 (4/4)" in note and "not measured" in note
    assert "0 minus the random directions' mean" in note


# ------------------------------------------------------ a reliability that is not estimable


def test_a_negative_split_half_reliability_is_reported_not_estimable_in_the_run():
    """The stage as a run calls it: the effect's halves (one prompt each) anti-correlate
    across concepts, so Spearman-Brown gives a negative value. It is no reliability: no
    metric, the reason in the record and the summary, the raw value under its own name,
    and the correlation it would correct is not estimable either."""
    from experiments.kernel.effect import EffectReport
    from experiments.phase5.measurement import measure
    from experiments.phase5.publish import measurement_metrics
    from experiments.phase5.report import measurement_markdown

    rng = np.random.default_rng(3)
    concepts = [f"c{i}" for i in range(12)]
    z = rng.normal(size=len(concepts))
    rows = [
        {"concept": c, "prompt_index": p, "sample": 0, "sign": sign, "above_null": value}
        for i, c in enumerate(concepts)
        for sign in (1, -1)
        for p, value in ((0, z[i]), (1, -z[i] + 0.1 * rng.normal()))
    ]
    effect = EffectReport(above_null=pd.DataFrame(rows))
    detection = {
        c: {
            "test_scores": list(rng.normal(size=8) + np.repeat([0.0, 1.0 + i / 4], 4)),
            "test_labels": [0] * 4 + [1] * 4,
            "threshold": 0.5,
        }
        for i, c in enumerate(concepts)
    }
    stats = measure(effect, CONFIG, detection).statistics
    rel = stats.reliability["effect_above_null_pos"]
    assert rel.estimate is None and rel.spearman_brown_raw is not None
    assert rel.spearman_brown_raw < 0
    assert "outside [0, 1]" in rel.reason and f"{rel.spearman_brown_raw:.3f}" in rel.reason
    metrics = measurement_metrics(stats)
    assert "reliability/effect_above_null_pos" not in metrics or (
        metrics["reliability/effect_above_null_pos"] is None
    )
    corrected = stats.corrected_correlations["predictor_vs_effect_pos"].corrected
    assert corrected.estimate is None and "not estimable" in corrected.reason
    assert metrics["correlation/predictor_vs_effect_pos/corrected"] is None
    text = "\n".join(measurement_markdown(stats))
    assert "| effect_above_null_pos | not estimable (" in text


# ------------------------------------------- the answer names where the directions came from


@pytest.mark.parametrize(
    ("source", "says", "never"),
    [
        ("classifier", ["concept classifier's quality", "trained probe's weights"], []),
        ("diffmean", ["trained probe", "direction source diffmean"], ["probe's weights"]),
        (
            "file",
            ["imported vector's detection quality", "imported from a file"],
            ["classifier", "degenerate probe", "Degenerate probe"],
        ),
    ],
)
def test_the_answer_names_where_the_directions_came_from(source, says, never, tmp_path):
    import matplotlib.pyplot as plt

    from experiments.phase5.figures import forest_figure, predictor_effect_figure

    vectors = tmp_path / "vectors.safetensors"  # a config naming a file needs one there
    vectors.write_bytes(b"")
    record = run_record(records(set()), source, str(vectors) if source == "file" else "")
    record.predictors["c4"]["auroc"] = 0.3  # a degenerate detector
    answer = answer_of(record)
    text = " ".join([answer.question, *answer.notes])
    for words in says:
        assert words in text, (source, words)
    for words in never:
        assert words not in text, (source, words)
    detector = {"file": "imported vector"}.get(source, "probe")
    assert f"Degenerate {detector}(s) as detectors" in text
    figures = [predictor_effect_figure(record, {}), forest_figure(record, {})]
    shown = " ".join(t.get_text() for fig in figures for t in fig.findobj(plt.Text) if t.get_text())
    assert f"degenerate {detector}" in shown
    if source == "file":
        assert "probe" not in shown.replace("the probe's test texts", "")
    for fig in figures:
        plt.close(fig)


# ------------------------------------------------ a null a sceptic can check (issue 64)


def with_delta_by_concept(frame: pd.DataFrame) -> pd.DataFrame:
    """Each row's Δ for every concept, as the scorer writes it: its own concept's Δ is
    ``delta``, the others' do not move (0), so the specificity margin is measured."""
    return frame.assign(
        delta_by_concept=[
            {c: (d if c == own else 0.0) for c in CONCEPTS}
            for own, d in zip(frame["concept"], frame["delta"], strict=True)
        ]
    )


def test_specificity_is_not_evaluable_on_a_sign_whose_every_text_was_gated():
    gated = run_record(with_delta_by_concept(records(set(CONCEPTS))))
    c = gated.criteria["v2_specificity_pos"]
    assert (c.status, c.value, c.reason) == ("not_evaluable", None, REASON)
    assert gated.criteria["v2_specificity_neg"].status == "pass"
    # The same texts, not gated: the margin is measured (and clearly above 0).
    measured = run_record(with_delta_by_concept(records(set())))
    assert measured.criteria["v2_specificity_pos"].status == "pass"


def test_the_answer_reads_the_effect_beside_the_nulls_gate_and_a_share_against_the_random():
    """The effect above null says how many of the null's and the concept's texts passed
    the gate; a share reads no "real (interval above 0)", sits beside the random
    directions' share and says why it differs from the seed's c1."""
    frame = records({"c0", "c1"})
    # Half the null's texts at s > 0 are gibberish the gate fails (10 of 20).
    null_pos = (frame["arm"] == "random:0") & (frame["strength"] > 0)
    frame.loc[null_pos & (frame["prompt_index"] < 2), "near_empty"] = True
    record = run_record(frame)
    record.criteria["c1_direction"] = CriterionRecord(
        key="c1_direction",
        description="c1",
        status="fail",
        value=0.667,
        threshold=0.8,
        reason="40/60",
    )
    verdicts = {v.key: v for v in answer_of(record).verdicts}
    effect = reading(verdicts["v2_effect_above_null_pos"])
    assert effect.endswith("; null texts passing the gate 10/20 (50%), concept texts 12/20 (60%)")
    assert reading(verdicts["v2_effect_above_null_neg"]).endswith(
        "null texts passing the gate 20/20 (100%), concept texts 20/20 (100%)"
    )
    share = verdicts["v2_direction_pos"]
    assert share.share and share.low is not None and 0 < share.low < share.high < 0.8
    assert "real" not in reading(share)
    random_share = record.statistics.effect["random/pos"].direction_fraction
    assert random_share is not None
    assert f"random directions {random_share:.2f}" in reading(share)
    assert "a gated text counts as not moved, unlike in the seed's c1 (0.667" in reading(share)
    assert not verdicts["v2_effect_above_null_pos"].share


def test_the_answer_shows_how_auto_effect_chose_the_layer_and_says_when_it_is_a_guess():
    from experiments.record import LayerChoice, LayerRow

    def choice(low_l9: float) -> LayerChoice:
        rows = {
            "4": LayerRow(effect=Interval(0.01, -0.04, 0.06), beta=0.2, gate_pass=0.9, auroc=0.8),
            "9": LayerRow(effect=Interval(0.03, low_l9, 0.08), beta=0.2, gate_pass=0.7, auroc=0.9),
            "14": LayerRow(
                effect=not_evaluable("every steered text at this layer was gated (6/6)")
            ),
        }
        return LayerChoice(rule="auto-effect", optimises="the effect", layer=9, layers=rows)

    record = run_record(records(set()))
    guessed = answer_of(record.model_copy(update={"layer_choice": choice(-0.01)}))
    note = next(n for n in guessed.notes if n.startswith("Layer auto-effect"))
    assert "no layer's effect above random directions is distinguishable from 0" in note
    assert "none of the 2 evaluable layers' intervals lies above 0" in note
    assert "L9 was taken for the largest lower bound (-0.010)" in note
    text = answer_markdown(guessed)
    assert "How --layer auto-effect chose layer 9: the effect:" in text
    assert "| L9 (chosen) | 0.2 | 0.030 [-0.010, 0.080] | n/a | n/a | 70% | 0.900 |" in text
    assert "| L14 | n/a | not evaluable: every steered text at this layer was gated (6/6) |" in text
    told = answer_of(record.model_copy(update={"layer_choice": choice(0.01)}))
    assert not any(n.startswith("Layer auto-effect") for n in told.notes)
    assert "| L9 (chosen) |" in answer_markdown(told)
    assert "How --layer" not in answer_markdown(answer_of(record))  # a layer given: no table


def test_the_corrected_correlation_says_it_can_exceed_1_wherever_it_is_printed():
    record = run_record(records(set()))
    unknown = Reliability(None, None, None, 10, 20, "split-half", "too few concepts")
    pair = Disattenuated(
        observed=Interval(0.41, -0.66, 0.86),
        corrected=Interval(1.203, 0.316, 2.644, 10),
        reliability_x=unknown,
        reliability_y=unknown,
    )
    measurement = Measurement(
        reliability={}, corrected_correlations={"predictor_vs_effect_pos": pair}
    )
    record.statistics.measurement = measurement
    note = next(n for n in answer_of(record).notes if "corrected for unreliability" in n)
    assert note == (
        "predictor → effect above null (r), corrected for unreliability (disattenuated; can "
        "exceed 1): s > 0 +1.203 [+0.316, +2.644]."
    )
    from experiments.phase5.report import measurement_markdown

    assert "| disattenuated (can exceed 1) |" in "\n".join(measurement_markdown(measurement))
