"""What a finished run shows where researchers look: ``answer.md`` in the folder, the
answer at the top of the MLflow description, the v2 metrics with their bounds, the
answer as structured ``--json`` (tiny random Gemma, real sqlite store)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from experiments import tracking
from experiments.answer import answer_markdown, significant, status_word
from experiments.cli import app
from experiments.phase5.answer import answer_of
from experiments.phase5.report import sample_links
from experiments.phase5.run import run_phase5
from experiments.rundir import RunDir


@pytest.fixture(scope="module")
def tiny_run(
    tmp_path_factory, mlflow_store, tiny_lm, embedder, single_threaded, tiny_phase5_config
):
    tmp = tmp_path_factory.mktemp("views")
    config = tiny_phase5_config(tmp)
    with single_threaded():
        return config, run_phase5(config, lm=tiny_lm, embedder=embedder)


def test_answer_md_is_the_answer_of_the_record(tiny_run):
    _config, result = tiny_run
    folder = RunDir(result.results_dir.parent, result.run_id)
    figures = tuple(sorted(p.name for p in folder.path.glob("*.png")))
    text = folder.file(RunDir.ANSWER).read_text(encoding="utf-8")
    texts = sample_links(result.run_id)
    assert text == answer_markdown(answer_of(folder.read_record(), figures, texts))
    assert "| s > 0 | effect above null (gated) |" in text


def test_the_run_description_starts_with_the_answer_and_the_metrics_have_bounds(tiny_run):
    _config, result = tiny_run
    run = tracking.get_run(result.run_id)
    note = run.data.tags[tracking.NOTE_TAG]
    assert note.startswith(f"## The answer (run `{result.run_id}`)")
    assert note.index("## The answer") < note.index("# Phase 5 run")
    intervals = result.record.statistics.intervals
    for key in ("v2_effect_above_null_pos", "v2_predictor_vs_effect_neg"):
        for bound in ("low", "high"):
            assert run.data.metrics[f"v2/criterion/{key}/{bound}"] == pytest.approx(
                getattr(intervals[key], bound)
            )
        assert f"v2/criterion/{key}/value" in run.data.metrics
    artifacts = {f.path for f in tracking.client().list_artifacts(result.run_id)}
    assert RunDir.ANSWER in artifacts


def test_rescore_json_carries_the_answer_as_fields(tiny_run, single_threaded):
    _config, result = tiny_run
    # One torch thread as in the run: the embedder's fp32 sums differ in the last bits
    # between thread counts on some CPUs (seen on an AMX Xeon), and so would the interval.
    with single_threaded():
        out = CliRunner().invoke(app, ["rescore", result.run_id, "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["phase"] == "phase5" and data["run_id"] == result.run_id
    crit = data["answer"]["criteria"]["v2_effect_above_null_pos"]
    stored = result.record.statistics.intervals["v2_effect_above_null_pos"]
    assert crit["low"] == pytest.approx(stored.low) and crit["high"] == pytest.approx(stored.high)
    assert crit["status"] in {"pass", "fail", "inconclusive"} and crit["threshold"] == 0.15
    assert set(data["answer"]["seed_criteria"]) >= {"c1_direction", "c3_f1_correlation"}
    assert data["answer"]["question"].startswith("Does a concept classifier's quality")


def test_the_reviewer_figures_are_written_and_logged(tiny_run):
    _config, result = tiny_run
    folder = RunDir(result.results_dir.parent, result.run_id)
    for name in ("predictor_vs_effect.png", "effect_forest.png"):
        assert folder.file(name).stat().st_size > 10_000
    plots = {f.path for f in tracking.client().list_artifacts(result.run_id, "plots")}
    assert {"plots/predictor_vs_effect.png", "plots/effect_forest.png"} <= plots


def test_each_concept_has_its_effect_above_null_with_an_interval_over_its_units(tiny_run):
    config, result = tiny_run
    units = len(config.generation.prompts) * config.generation.samples_per_prompt
    for values in result.record.per_concept.values():
        for sign in ("pos", "neg"):
            low, high = values[f"above_null_{sign}_low"], values[f"above_null_{sign}_high"]
            assert low <= high and values[f"above_null_{sign}_n"] == units
            assert values[f"above_null_{sign}"] is not None


def test_the_predictor_interval_is_rebuilt_from_the_records_counts():
    from experiments.phase5.per_concept import predictor_interval
    from metrics.stats import bootstrap_f1

    # tp 12, fn 8, fp 5, tn 15 on 20 + 20 test texts.
    metrics = {
        "recall_calibrated": 12 / 20,
        "accuracy_calibrated": 27 / 40,
        "n_test_pos": 20.0,
        "n_test_neg": 20.0,
        "auroc": 0.8,
    }
    expected = bootstrap_f1(12, 8, 5, 15)
    assert predictor_interval(metrics, "f1_calibrated") == (expected.low, expected.high)
    assert predictor_interval(metrics, "auroc") == (None, None)
    assert predictor_interval({"recall_raw": 0.5}, "f1_raw") == (None, None)


def test_every_printed_address_opens_on_the_answer(tiny_run):
    from experiments.cli.ui import addresses

    config, result = tiny_run
    experiment = tracking.experiment_id(config.tracking.experiment)
    latest = tracking.latest_parent_run(config.tracking.experiment, "5")
    found = dict(addresses())
    newest = f"newest Phase 5 run ({config.tracking.experiment}), on its answer"
    assert found[newest] == tracking.ui_url(experiment, latest, artifact=RunDir.ANSWER)
    assert found[newest].endswith(
        f"/runs/{latest}/artifacts/answer.md?workflowType=machine_learning"
    )
    assert tracking.run_ui_url(result.run_id).endswith(
        f"#/experiments/{experiment}/runs/{result.run_id}/artifacts/answer.md"
        "?workflowType=machine_learning"
    )
    bare = tracking.start_run(config.tracking.experiment, "no answer", tags={"phase": "x"})
    assert tracking.run_ui_url(bare).endswith(f"/runs/{bare}?workflowType=machine_learning")


def test_the_experiment_description_leads_with_the_latest_answer(tiny_run):
    config, result = tiny_run
    experiment = tracking.client().get_experiment_by_name(config.tracking.experiment)
    note = experiment.tags[tracking.NOTE_TAG]
    link = f"#/experiments/{experiment.experiment_id}/runs/{result.run_id}/artifacts/answer.md"
    assert note.startswith(f"**Latest answer** ([open]({link}")
    first = note.split("\n")[0]
    assert "predictor → effect above null (r): s > 0 **" in first and len(first) < 400
    assert tracking.EXPERIMENT_NOTES[config.tracking.experiment] in note


def test_the_steered_generations_are_in_mlflows_genai_evaluation(tiny_run):
    """After the run and its rescore: one evaluation child whose scorers, one per measure
    and sign, have the v2 estimates of their sign as means; each steered trace carries
    one assessment per scorer of its own sign and none of the other's."""
    import json

    import mlflow

    from experiments.phase5.evaluation import MEASURES
    from experiments.tracking.evaluation import EVALUATION_TAG

    config, result = tiny_run
    children = tracking.child_runs(result.run_id, config.tracking.experiment)
    evaluations = [c for c in children if c.data.tags.get(EVALUATION_TAG)]
    assert len(evaluations) == 1
    run = evaluations[0]
    assert run.data.tags["mlflow.runType"] == "genai_evaluate" and run.info.status == "FINISHED"
    intervals = result.record.statistics.intervals
    for sign in ("pos", "neg"):
        direction = intervals[f"v2_direction_{sign}"].estimate
        assert run.data.metrics[f"moved_as_steered_{sign}/mean"] == pytest.approx(direction)
        effect = intervals[f"v2_effect_above_null_{sign}"].estimate
        assert run.data.metrics[f"effect_above_null_{sign}/mean"] == pytest.approx(effect)
    assert "moved_as_steered/mean" not in run.data.metrics  # no pool of both signs
    parent = tracking.get_run(result.run_id).data.metrics
    assert parent["evaluation/gate_pass_pos/mean"] == run.data.metrics["gate_pass_pos/mean"]
    assert parent["time/evaluation"] > 0
    folder = RunDir(result.results_dir.parent, result.run_id)
    mapping = json.loads(folder.file(RunDir.TRACES).read_text())
    for sign, other, mark in (("pos", "neg", "|s+1.000"), ("neg", "pos", "|s-1.000")):
        steered = [k for k in mapping if mark in k and "random" not in k]
        assert steered
        for key in steered:
            names = [a.name for a in mlflow.get_trace(mapping[key]).info.assessments]
            for measure in MEASURES:
                assert names.count(f"{measure}_{sign}") == 1, (key, names)
                assert names.count(f"{measure}_{other}") == 0, (key, names)


def test_traces_carry_the_twins_and_the_generation_s_times(tiny_run):
    """A steered trace shows its unsteered twin's text and Δ and, on the concept arm, its
    random twin's text, Δ, effect and gate; every span starts and ends when its batch was
    generated (generations.jsonl), not when it was logged."""
    import json

    import mlflow

    from experiments.rundir import read_jsonl

    _config, result = tiny_run
    folder = RunDir(result.results_dir.parent, result.run_id)
    mapping = json.loads(folder.file(RunDir.TRACES).read_text())
    rows = {g["key"]: g for g in folder.read_generations()}
    deltas = {s["key"]: s["delta"] for s in read_jsonl(folder.file(RunDir.SCORES))}
    checked = checked_random = 0
    for key, trace_id in mapping.items():
        row = rows[key]
        span = mlflow.get_trace(trace_id).data.spans[0]
        assert span.start_time_ns == row["started_ns"] and span.end_time_ns == row["ended_ns"]
        assert row["ended_ns"] > row["started_ns"]
        twin = span.attributes.get("unsteered_twin_text")
        if row["strength"] == 0:
            assert twin is None
            continue
        unit = (row["concept"], row["prompt_index"], row["sample"], row["split"])
        base = [
            g
            for g in rows.values()
            if g["strength"] == 0
            and (g["concept"], g["prompt_index"], g["sample"], g["split"]) == unit
        ]
        assert len(base) == 1 and twin == base[0]["text"]
        assert span.attributes.get("unsteered_twin_delta") == pytest.approx(deltas[base[0]["key"]])
        if row["arm"] == "concept":  # its random twin: what entered the null
            random = rows[span.attributes["random_twin_key"]]
            assert random["arm"] == span.attributes["random_twin_arm"] == "random:0"
            assert (random["prompt_index"], random["sample"]) == unit[1:3]
            assert (random["strength"] > 0) == (row["strength"] > 0)
            assert span.attributes["random_twin_text"] == random["text"]
            assert span.attributes["random_twin_delta"] == pytest.approx(deltas[random["key"]])
            assert span.attributes["random_twin_gate"] in ("pass", "fail")
            effect = (1 if row["strength"] > 0 else -1) * (
                deltas[random["key"]] - deltas[base[0]["key"]]
            )
            assert span.attributes["random_twin_effect"] == pytest.approx(effect)
            checked_random += 1
        else:
            assert "random_twin_text" not in span.attributes
        checked += 1
    assert checked > 0 and checked_random > 0


# ------------------------------------------------------------ what a reader checks


def test_samples_put_each_steered_text_beside_its_twins(tiny_run):
    """samples.csv and the MLflow table samples.json: one row per steered concept-arm
    text, text first and keys last, its twins' texts, Δ and gates read from the run
    folder, e = sign·(Δs − Δ0), the random twin's own effect, the trace's id."""
    import statistics

    import pandas as pd

    from experiments.phase5.publish import SAMPLES_TABLE
    from experiments.phase5.samples import COLUMNS
    from experiments.rundir import read_jsonl, restore
    from metrics.text import alphabetic_share

    _config, result = tiny_run
    folder = RunDir(result.results_dir.parent, result.run_id)
    logged = tracking.client().download_artifacts(result.run_id, SAMPLES_TABLE)
    with open(logged, encoding="utf-8") as f:
        frame = json.load(f)
    table = pd.DataFrame(frame["data"], columns=frame["columns"])
    assert list(table.columns) == list(COLUMNS)
    assert COLUMNS[0] == "text" and COLUMNS[-3:] == ("key", "key_unsteered", "key_random")
    generations = read_jsonl(folder.file(RunDir.GENERATIONS))
    scores = {s["key"]: s for s in read_jsonl(folder.file(RunDir.SCORES))}
    traces = json.loads(folder.file(RunDir.TRACES).read_text())
    steered = [g for g in generations if g["arm"] == "concept" and g["strength"] != 0]
    assert len(table) == len(steered) > 0
    side = {0: "unsteered"}
    by_unit = {
        (
            g["concept"],
            g["prompt"],
            g["sample"],
            g["arm"],
            side.get(g["strength"], g["strength"] > 0),
        ): g
        for g in generations
    }
    for row in table.itertuples():
        pos = row.sign == "s > 0"
        twin = by_unit[(row.concept, row.prompt, row.sample, "concept", "unsteered")]
        random = by_unit[(row.concept, row.prompt, row.sample, "random:0", pos)]
        sign = 1 if pos else -1
        assert row.text_unsteered == twin["text"] and row.key_unsteered == twin["key"]
        assert row.delta_0 == pytest.approx(scores[twin["key"]]["delta"])
        assert row.text_random == random["text"] and row.key_random == random["key"]
        assert row.delta_random == pytest.approx(scores[random["key"]]["delta"])
        assert row.effect_random == pytest.approx(sign * (row.delta_random - row.delta_0))
        assert row.delta_s == pytest.approx(scores[row.key]["delta"])
        assert row.effect == pytest.approx(sign * (row.delta_s - row.delta_0))
        for gate, reason in [
            (row.gate, row.gate_reason),
            (row.gate_unsteered, row.gate_reason_unsteered),
            (row.gate_random, row.gate_reason_random),
        ]:
            assert gate in ("pass", "fail") and (gate == "pass") == (reason == "")
        assert row.effect_gated == (row.effect if row.gate == "pass" else 0.0)
        assert row.trace_id == traces[row.key]
        assert row.repetition == pytest.approx(scores[row.key]["repetition"])
        unsteered = [
            scores[g["key"]]["perplexity"]
            for g in generations
            if g["concept"] == row.concept and g["strength"] == 0 and g["split"] == "report"
        ]
        ratio = scores[row.key]["perplexity"] / statistics.median(unsteered)
        assert row.perplexity_ratio == pytest.approx(ratio)
        # What the gate read of the random twin (the null), and every text's share of
        # alphabetic words (the non-language rule's measure).
        random_ratio = scores[random["key"]]["perplexity"] / statistics.median(unsteered)
        assert row.perplexity_ratio_random == pytest.approx(random_ratio)
        assert row.repetition_random == pytest.approx(scores[random["key"]]["repetition"])
        assert row.alphabetic_share_random == pytest.approx(alphabetic_share(random["text"]))
        assert row.alphabetic_share == pytest.approx(alphabetic_share(row.text))
        assert row.alphabetic_share_unsteered == pytest.approx(alphabetic_share(twin["text"]))
    csv_rows = pd.read_csv(folder.file(RunDir.SAMPLES), dtype=str, keep_default_na=False)
    assert list(csv_rows.columns) == frame["columns"] and len(csv_rows) == len(table)
    assert [restore(t) for t in csv_rows["text"]] == list(table["text"])


def test_samples_csv_cells_do_not_execute():
    import pandas as pd

    from experiments.phase5.samples import samples_csv

    text = samples_csv(
        pd.DataFrame(
            {
                "text": ["=HYPERLINK(1)", " +1", "@x", "fine", "\nA line"],
                "delta_s": [-0.5, 0.1, 0.2, 0.3, 0.4],
            }
        )
    )
    # OWASP's triggers first (= + - @ tab CR) get the prefix; a space or a line break
    # first (a continuation of the prompt) is text and is left as it is
    assert text.splitlines() == [
        "text,delta_s", "'=HYPERLINK(1),-0.5", " +1,0.1", "'@x,0.2", "fine,0.3", '"', 'A line",0.4'
    ]  # fmt: skip


@pytest.fixture
def planted(tiny_run):
    """The tiny run's record with planted cases: the first concept's texts all gated out
    at s > 0, the second's probe below chance, the third's predicting every text positive."""
    _config, result = tiny_run
    record = result.record.model_copy(deep=True)
    a, b, c = sorted(record.per_concept)[:3]
    for synset in record.per_concept:
        record.per_concept[synset].update(
            gated_out_pos=0.0, steered_pos=3.0, gated_out_neg=0.0, steered_neg=3.0
        )
    record.per_concept[a].update(gated_out_pos=3.0)
    record.per_concept[b].update(gated_out_neg=1.0)
    record.predictors[b] = {**record.predictors[b], "auroc": 0.46}
    record.predictors[c] = {
        **record.predictors[c],
        "auroc": 0.7,
        "recall_calibrated": 1.0,
        "precision_calibrated": 0.5,
        "accuracy_calibrated": 0.5,
        "n_test_pos": 20.0,
        "n_test_neg": 20.0,
    }
    return record, (a, b, c)


def _label_boxes(fig):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for ax in fig.axes for t in ax.texts if t.get_text()]


def _overlapping(boxes) -> list:
    return [
        (i, j) for i, a in enumerate(boxes) for j, b in enumerate(boxes) if i < j and a.overlaps(b)
    ]


def test_the_predictor_figure_marks_gated_degenerate_and_n(planted):
    import matplotlib.pyplot as plt

    from experiments.phase5.figures import predictor_effect_figure

    record, (a, b, _c) = planted
    fig = predictor_effect_figure(record, {k: k.split(".")[0] for k in record.per_concept})
    left, right = fig.axes[:2]
    assert left.get_shared_x_axes().joined(left, right) and left.get_shared_y_axes().joined(
        left, right
    )
    labels = {t.get_text() for ax in fig.axes for t in ax.texts if t.get_text()}
    n = int(record.per_concept[a]["above_null_pos_n"])
    assert all(f"n={n}" in t for t in labels), labels  # n on every interval
    assert f"{a.split('.')[0]} · n={n} · 3/3 gated, not measured" in labels
    assert any(t.startswith(f"{b.split('.')[0]} · n={n} · 1/3 gated · ⚠") for t in labels)
    title = fig._suptitle.get_text()
    assert "hollow at 0, no interval: every steered text gated out" in title
    assert "AUROC 0.46 < 0.5" in title and "predicts every test text positive" in title
    hollow = [line for ax in fig.axes for line in ax.lines if line.get_markerfacecolor() == "none"]
    assert len(hollow) == 1  # a's point at s > 0 only
    crosses = [line for ax in fig.axes for line in ax.lines if line.get_marker() == "X"]
    assert len(crosses) == 2 * 2  # b and c, in both panels
    assert not _overlapping(_label_boxes(fig))
    plt.close(fig)


def test_the_forest_figure_marks_gated_and_n(planted):
    import matplotlib.pyplot as plt

    from experiments.phase5.figures import forest_figure

    record, (a, b, _c) = planted
    fig = forest_figure(record, {k: k.split(".")[0] for k in record.per_concept})
    ax = fig.axes[0]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert rows[0].startswith("all concepts (v2), n=") and rows[0].endswith(" concepts")
    assert all(" · n=" in r for r in rows[1:])
    assert any(r.startswith(f"{a.split('.')[0]} ·") and "s > 0: 3/3 gated" in r for r in rows)
    assert any(r.startswith(f"{b.split('.')[0]} ·") and r.endswith("⚠") for r in rows)
    assert "hollow at 0, no interval: every steered text gated out" in ax.get_xlabel()
    assert sum(line.get_markerfacecolor() == "none" for line in ax.lines) == 1
    plt.close(fig)


def test_the_answer_names_gated_concepts_and_degenerate_probes_and_links_figures(planted, tiny_run):
    record, (a, b, c) = planted
    answer = answer_of(record, ("effect_forest.png", "predictor_vs_effect.png"))
    notes = " ".join(answer.notes)
    assert f"{a} (3/3)" in notes and "enters r" in notes
    assert f"{b}: AUROC 0.46 < 0.5" in notes
    assert f"{c}: predicts every test text positive (precision 0.50, recall 1.00)" in notes
    text = answer_markdown(answer)
    assert "[predictor_vs_effect.png](predictor_vs_effect.png)" in text
    _config, result = tiny_run
    folder = RunDir(result.results_dir.parent, result.run_id)
    written = folder.file(RunDir.ANSWER).read_text(encoding="utf-8")
    logged = tracking.client().download_artifacts(result.run_id, RunDir.ANSWER)
    with open(logged, encoding="utf-8") as f:
        in_mlflow = f.read()
    experiment = tracking.get_run(result.run_id).info.experiment_id
    for png in folder.path.glob("*.png"):
        assert f"[{png.name}]({png.name})" in written  # beside answer.md in the folder
        ui = tracking.ui_path(experiment, result.run_id, artifact=f"plots/{png.name}")
        assert f"[{png.name}]({ui})" in in_mlflow  # the run's artefact in the UI
    # The texts behind the verdicts, linked first: the file beside it, the artefact in MLflow.
    assert "The texts behind the verdicts: [samples.csv](samples.csv)." in written
    ui = tracking.ui_path(experiment, result.run_id, artifact=RunDir.SAMPLES)
    assert f"The texts behind the verdicts: [samples.csv]({ui})." in in_mlflow
    assert written.index("samples.csv") < written.index(".png")
    artefacts = {a.path for a in tracking.client().list_artifacts(result.run_id)}
    assert RunDir.SAMPLES in artefacts


def test_labels_are_placed_without_overlap_on_crowded_points():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.phase5.figures import place_labels

    fig, ax = plt.subplots(figsize=(5, 4))
    points = [(0.667, 0.0), (0.667, 0.001), (0.667, 0.002), (0.668, 0.0), (0.3, 0.05), (0.9, -0.05)]
    ax.scatter(*zip(*points, strict=True))
    ax.set(xlim=(0.2, 1.0), ylim=(-0.1, 0.1))
    fig.tight_layout()
    anns = place_labels(ax, points, [f"concept number {i}" for i in range(len(points))])
    assert len(anns) == len(points)
    assert not _overlapping(_label_boxes(fig))
    plt.close(fig)


# ------------------------------------------------------------ runs you can list and open


def test_runs_lists_the_run_with_the_verdicts_of_its_answer(tiny_run):
    """``steer-eval runs --json``: the run under its experiment, its verdicts per sign
    exactly as criteria.csv (the answer) says; the table names it; an unknown experiment
    is a clear error."""
    config, result = tiny_run
    out = CliRunner().invoke(app, ["runs", "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.stderr
    listed = {r["run_id"]: r for r in json.loads(out.stdout)["runs"]}
    run = listed[result.run_id]
    assert run["experiment"] == config.tracking.experiment and run["status"] == "FINISHED"
    record = RunDir(result.results_dir.parent, result.run_id).read_record()
    for key, sign in (("v2_effect_above_null_pos", "s > 0"), ("v2_direction_neg", "s < 0")):
        shown = run["verdicts"][sign][key]
        assert shown["status"] == record.criteria[key].status
        assert shown["value"] == pytest.approx(record.criteria[key].value)
    table = CliRunner().invoke(app, ["runs", "-e", config.tracking.experiment])
    assert result.run_id in table.stdout and "effect above null" in table.stdout
    bad = CliRunner().invoke(app, ["runs", "-e", "no-such-experiment"])
    assert bad.exit_code == 2 and "no experiment no-such-experiment" in bad.stderr


def test_reliabilities_and_corrected_correlations_are_metrics(tiny_run):
    _config, result = tiny_run
    metrics = tracking.get_run(result.run_id).data.metrics
    measurement = result.record.statistics.measurement
    assert measurement is not None
    rel = measurement.reliability["specificity_pos"].estimate
    assert metrics["reliability/specificity_pos"] == pytest.approx(rel)
    pair = measurement.corrected_correlations["predictor_vs_effect_neg"]
    assert metrics["correlation/predictor_vs_effect_neg/observed"] == pytest.approx(
        pair.observed.estimate
    )
    assert metrics["correlation/predictor_vs_effect_neg/observed/low"] == pytest.approx(
        pair.observed.low
    )


def test_the_runs_table_opens_on_columns_the_runs_have(tiny_run):
    """The experiment's shared view names metric and parameter columns that the run
    logs, and the experiment's address opens on it."""
    from experiments.phase5.publish import record_metrics
    from experiments.rundir import RESCORED_TAG
    from experiments.tracking.columns import VIEW_KEY, VIEW_TAG

    config, result = tiny_run
    exp = tracking.client().get_experiment_by_name(config.tracking.experiment)
    view = json.loads(exp.tags[VIEW_TAG])  # MLflow 3.17's saved-view envelope
    assert view["name"] and isinstance(view["createdAt"], int)
    columns = json.loads(view["state"])["selectedColumns"]
    run = tracking.get_run(result.run_id)
    tags = [c[len("tags.`") : -1] for c in columns if c.startswith("tags.")]
    metrics = [c[len("metrics.`") : -1] for c in columns if c.startswith("metrics.")]
    params = [c[len("params.`") : -1] for c in columns if c.startswith("params.")]
    # The verdicts lead, each a tag the run has: status, observed value [low, high]; the
    # corrected correlations after the observed ones (a corrected r that could not be
    # computed is a tag with its reason, or none, so its column may be empty).
    assert columns[: len(tags)] == [f"tags.`{t}`" for t in tags]
    observed = [t for t in tags if "corrected" not in t and t != RESCORED_TAG]
    assert tags[-1] == RESCORED_TAG  # what a rescore changed: empty on this run
    assert observed and set(observed) <= set(run.data.tags)
    assert max(map(tags.index, observed)) < min(t for t, n in enumerate(tags) if "corrected" in n)
    cell = run.data.tags["pos effect above null"]
    criterion = result.record.criteria["v2_effect_above_null_pos"]
    assert cell.startswith(status_word(criterion.status))
    if criterion.value is not None:
        assert significant(criterion.value) in cell
    assert metrics and set(metrics) <= set(record_metrics(result.record))
    assert params and set(params) <= set(run.data.params)
    assert columns[-1].startswith("attributes.")  # the UI's own columns last
    assert tracking.ui_url(exp.experiment_id).endswith(
        f"#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning"
        f"&viewStateShareKey={VIEW_KEY}"
    )
    assert "viewStateShareKey" not in tracking.run_ui_url(result.run_id)
