"""``--layer auto-effect`` (issue 55, item 5b): the layer chosen by measured steering.

The rule is held to a real run on the tiny random Gemma (probes trained, texts generated,
scored by the embedder, the effect above random directions measured per layer) and to
an effect table the suite's own code builds from fixed texts, where one layer clearly
steers and the other does not; the record and the tags carry the rule and its table;
the dry run previews it without loading weights; a bad ``--layer`` names the choices.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments import tracking
from experiments.cli import app
from experiments.concepts import load_concepts
from experiments.config import ConfigError, load_config
from experiments.kernel.generate import generation_record
from experiments.kernel.layers import (
    LAYER_RULE_TAG,
    LAYER_TABLE_TAG,
    RULES,
    best_by_effect,
    effect_layer,
    layer_effect,
    selection_config,
    texts_per_layer,
)
from experiments.kernel.plan import CONCEPT_ARM, planned_rows
from experiments.kernel.score import build_scorer, score_all
from experiments.record import LayerRow
from experiments.rundir import RunDir, join_scores
from metrics.intervals import Interval, not_evaluable
from steering.generation import Generation

runner = CliRunner()


def layer_config(tmp_path, *extra: str):
    return load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=3",
            "generation.max_new_tokens=8",
            "generation.batch_size=16",
            "selection.mode=heldout",
            "tracking.traces=false",
            "tracking.child_runs=none",
            f"classifier.dir={tmp_path / 'cls'}",
            f"tracking.results_dir={tmp_path / 'res'}",
            *extra,
        ],
    )


def _said(out) -> str:
    return " ".join((out.stdout + out.stderr).split())


def test_the_texts_are_the_selection_prompts_at_one_beta_with_the_null(tmp_path):
    config = layer_config(tmp_path)
    graph = load_concepts(config.concepts.file, limit=3)
    rows = [m for _k, m in planned_rows(config, graph, "selection", null_arms=True)]
    report = {m["prompt_index"] for _k, m in planned_rows(config, graph, "report")}
    assert {m["prompt_index"] for m in rows} == {0} and 0 not in report  # never a report prompt
    assert {m["split"] for m in rows} == {"selection"} and {m["beta"] for m in rows} == {0.2}
    assert {m["arm"] for m in rows} == {CONCEPT_ARM, "random:0"}
    # 3 concepts × 1 prompt × (the unsteered twin + 2 signs × (concept + 1 random))
    assert len(rows) == texts_per_layer(config, graph) == 15
    with pytest.raises(ConfigError, match="add --selection heldout"):
        selection_config(layer_config(tmp_path, "selection.mode=none"))
    with pytest.raises(ConfigError, match="random_directions to 1 or more"):
        selection_config(layer_config(tmp_path, "controls.random_directions=0"))


def _fixed_records(config, graph, scorer, steers: bool) -> pd.DataFrame:
    """The selection texts of one layer, written by hand and scored by the suite: where
    ``steers``, s > 0 along the concept turns the text to the concept; everything else
    (the unsteered twin, s < 0, the random directions) is one neutral sentence."""
    neutral = "The train left the station at noon and the fields went by slowly."
    gens = []
    for key, meta in planned_rows(config, graph, "selection", null_arms=True):
        on_topic = steers and meta["arm"] == CONCEPT_ARM and meta["strength"] > 0
        name = meta["concept_name"]
        text = f"A note on {name}: what a {name} is, and why people care." if on_topic else neutral
        gen = Generation(key, meta["prompt"], text, list(range(12)), 5, False)
        gens.append(generation_record(meta, gen, 2.0, 1.0))
    return pd.DataFrame(join_scores(gens, score_all(scorer, gens)))


def test_on_a_table_the_suite_builds_the_layer_that_steers_wins(tmp_path, embedder):
    config = layer_config(tmp_path)
    graph = load_concepts(config.concepts.file, limit=3)
    scorer = build_scorer(config, graph, embedder)
    steering = layer_effect(_fixed_records(config, graph, scorer, steers=True), config)
    idle = layer_effect(_fixed_records(config, graph, scorer, steers=False), config)
    assert steering.texts == idle.texts == 15 and steering.gate_pass == 1.0
    assert idle.effect is not None
    assert idle.effect.ends() == (0.0, 0.0, 0.0)  # same text in every arm: no effect
    assert steering.effect_neg == 0.0 and steering.effect_pos is not None
    assert steering.low is not None and steering.low > 0 and steering.effect_pos > 0
    assert best_by_effect({7: idle, 11: steering}) == 11
    assert best_by_effect({4: steering, 9: steering}) == 4  # a tie goes to the earlier layer
    # the lower bound decides, not the estimate; a layer not evaluable ranks last
    wide = LayerRow(effect=Interval(0.5, -0.1, 1.1))
    narrow = LayerRow(effect=Interval(0.2, 0.1, 0.3))
    gated = LayerRow(effect=not_evaluable("every steered text at this layer was gated (15/15)"))
    assert best_by_effect({4: wide, 7: narrow, 9: gated}) == 7
    with pytest.raises(ConfigError, match=r"no layer.s effect is evaluable.*L9: every steered"):
        best_by_effect({9: gated})


def test_auto_effect_on_the_tiny_model_picks_its_best_lower_bound_and_records_it(
    tiny_lm, embedder, tmp_path, mlflow_store, one_thread
):
    from experiments.phase5.run import run_phase5

    config = layer_config(tmp_path)
    graph = load_concepts(config.concepts.file, limit=3)
    said: list[str] = []
    choice = effect_layer(config, tiny_lm, graph, embedder, [1, 2, 3], say=said.append)
    table = {int(k): row for k, row in choice.layers.items()}
    assert sorted(table) == [1, 2, 3] and choice.rule == "auto-effect"
    assert choice.optimises == RULES["auto-effect"]
    for row in table.values():
        assert row.texts == 15 and row.beta == 0.2 and row.auroc is not None
    lows = {la: row.low for la, row in table.items() if row.low is not None}
    assert lows and len(set(lows.values())) > 1  # the layers differ
    assert choice.layer == max(lows, key=lambda la: lows[la]) == best_by_effect(table)
    # A random model steers nowhere: when no layer's interval lies above 0, the rule
    # still takes the largest lower bound and says, last, that it is a guess.
    guess = not any(low > 0 for low in lows.values())
    chosen = said[-2] if guess else said[-1]
    assert chosen.startswith(f"layer auto-effect: {choice.layer} (effect above null")
    if guess:
        assert said[-1].startswith(
            "layer auto-effect: no layer's effect above random directions is "
            f"distinguishable from 0 (none of the {len(lows)} evaluable layers' intervals"
        )
    assert all(any(s.startswith(f"layer auto-effect: L{la} ") for s in said) for la in (1, 2, 3))

    # the run steers the chosen layer; its record, folder and tags carry rule and table
    run_config = config.model_copy(update={"layer": choice.layer})
    result = run_phase5(run_config, lm=tiny_lm, embedder=embedder, layer_choice=choice)
    assert result.record.layer == choice.layer and result.record.layer_choice == choice
    kept = json.loads((result.results_dir / RunDir.LAYER_CHOICE).read_text())
    assert kept["rule"] == "auto-effect" and set(kept["layers"]) == {"1", "2", "3"}
    tags = tracking.get_run(result.run_id).data.tags
    assert tags[LAYER_RULE_TAG].startswith("auto-effect: the measured steering effect")
    assert tags[LAYER_TABLE_TAG].startswith("effect above null by layer")
    assert all(f"L{la} " in tags[LAYER_TABLE_TAG] for la in (1, 2, 3))
    # answer.md shows the table under the verdicts, the chosen layer marked, and the note
    answer = (result.results_dir / RunDir.ANSWER).read_text()
    assert f"How --layer auto-effect chose layer {choice.layer}:" in answer
    assert all(f"| L{la}" in answer for la in (1, 2, 3))
    assert f"| L{choice.layer} (chosen) |" in answer
    assert ("no layer's effect above random directions is distinguishable" in answer) == guess


def test_the_dry_run_previews_auto_effect_and_loads_no_weights(monkeypatch, mlflow_store, tmp_path):
    from steering.models import ModelSpec

    def refuse(*_args, **_kwargs):
        raise AssertionError("a dry run loaded weights")

    monkeypatch.setattr(ModelSpec, "load", refuse)
    monkeypatch.setattr("metrics.embedder.load_embedder", refuse)
    args = ["run", "--dry-run", "--layer", "auto-effect", "--concepts", "3",
            "--selection", "heldout", "--set", f"classifier.dir={tmp_path}"]  # fmt: skip
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.stderr
    text = _said(out)
    assert "layer auto-effect maximises the measured steering effect" in text
    assert "candidate layers [4, 7, 9, 11, 14]: probes saved at none" in text
    assert "per layer: 15 texts (selection prompts only" in text
    assert "at β L4 0.2, L7 0.2, L9 0.2, L11 0.2, L14 0.2" in text and "75 texts in all" in text
    plan = json.loads(runner.invoke(app, [*args, "--json"]).stdout)["layer_rule"]
    assert plan["rule"] == "auto-effect" and plan["layers"] == [4, 7, 9, 11, 14]
    assert plan["texts"] == 75 and plan["train"] == [4, 7, 9, 11, 14]
    # the probe sweep previews too (it generates nothing)
    out = runner.invoke(app, ["run", "--dry-run", "--layer", "auto", "--concepts", "2"])
    assert out.exit_code == 0 and "layer auto maximises the probes' mean test AUROC" in _said(out)
    # a run that would score its selection prompts is refused before anything loads
    out = runner.invoke(app, ["run", "--dry-run", "--layer", "auto-effect", "--concepts", "2"])
    assert out.exit_code != 0 and "add --selection heldout" in _said(out)
    out = runner.invoke(app, ["run", "--layer", "auto-effect", "--concepts", "2"])  # a real run
    assert out.exit_code != 0 and "add --selection heldout" in _said(out)
    assert "loaded weights" not in _said(out)


def test_a_bad_layer_names_the_choices(mlflow_store):
    out = runner.invoke(app, ["run", "--dry-run", "--layer", "best"])
    assert out.exit_code == 2
    assert "--layer 'best': give a layer number, auto (the best probe AUROC) or auto-effect" in (
        _said(out)
    )
    out = runner.invoke(app, ["run", "--layer", "auto-effect", "--resume", "latest"])
    assert out.exit_code == 2 and "chooses a new run's layer: not with --resume" in _said(out)


def test_selection_may_draw_fewer_samples_per_prompt_than_the_report(tmp_path):
    """``selection.samples_per_prompt`` sets the selection prompts' samples only; the
    report keeps ``generation.samples_per_prompt``, and unset, both are the same."""
    graph = load_concepts("data/concepts/wordnet_top10.json", limit=3)

    def samples(config, split):
        return {m["sample"] for _k, m in planned_rows(config, graph, split)}

    same = layer_config(tmp_path, "generation.samples_per_prompt=4")
    assert samples(same, "selection") == samples(same, "report") == {0, 1, 2, 3}
    fewer = layer_config(
        tmp_path, "generation.samples_per_prompt=4", "selection.samples_per_prompt=1"
    )
    assert samples(fewer, "selection") == {0} and samples(fewer, "report") == {0, 1, 2, 3}
    assert (
        fewer.config_hash()
        != same.config_hash()
        == layer_config(
            tmp_path, "generation.samples_per_prompt=4", "selection.samples_per_prompt=null"
        ).config_hash()
    )
