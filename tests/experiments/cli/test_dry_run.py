"""``--dry-run`` checks before it plans (issue 37, item 2).

It reads the model's config (no weights) and refuses a missing model, a layer out of
range and a dtype the device cannot run; it shows device, dtype, layer, batch size and
stages; its time comes only from an earlier run of the same model on the same device on
this machine (the stage timings of its record, summed), else "no estimate". The CUDA card
without bf16 is faked through torch's own queries (no GPU here); everything else is the
real CLI on the embedded model's and the shipped 4B's configs.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import huggingface_hub.constants as hub
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from experiments import tracking
from experiments.cli import app
from experiments.rundir import RUN_DIR_TAG, RunDir
from experiments.tracking.context import CPUS_TAG, DEVICE_TAG, HOST_TAG, LOAD_TAG, MODEL_TAG

REPO = Path(__file__).resolve().parents[3]
runner = CliRunner()
EMBEDDED_ID = "embedded:gemma-3-270m"


def _said(out) -> str:
    return " ".join((out.stdout + out.stderr).split())


def _earlier_run(experiment, tmp_path, name, timings, device="cpu", model=EMBEDDED_ID, phase="5",
                 source="classifier", load=None):  # fmt: skip
    """A finished run in the store with a record holding ``timings`` (30 rows × 10);
    ``load``: (load average, CPU count) its tags say it started with."""
    folder = tmp_path / name
    folder.mkdir()
    record = {
        "timings": timings,
        "n_generations": 18,
        "config": {"generation": {"max_new_tokens": 10}, "steering": {"vector_source": source}},
    }
    (folder / "steering_results.json").write_text(json.dumps(record))
    # every row it generated (the record's n_generations counts the concept arm only)
    (folder / "generations.jsonl").write_text("".join(f'{{"key": "k{i}"}}\n' for i in range(30)))
    tags = {"phase": phase, HOST_TAG: platform.node(), DEVICE_TAG: device, MODEL_TAG: model,
            RUN_DIR_TAG: str(folder)}  # fmt: skip
    if load is not None:
        tags |= {LOAD_TAG: str(load[0]), CPUS_TAG: str(load[1])}
    run_id = tracking.start_run(experiment, name, tags=tags)
    tracking.end_run(run_id)
    return run_id


def test_a_good_plan_shows_the_setup_and_sums_an_earlier_runs_stages(mlflow_store, tmp_path):
    experiment = "dry-run-estimate"
    timings = {"model_load": 4.0, "classifiers": 6.0, "generation": 30.0, "embedding": 10.0}
    ours = _earlier_run(experiment, tmp_path, "same model and device", timings)
    _earlier_run(experiment, tmp_path, "on a card", {"generation": 1.0}, device="cuda")
    _earlier_run(experiment, tmp_path, "another model", {"generation": 1.0}, model="gguf:x")
    _earlier_run(experiment, tmp_path, "other vectors", {"generation": 1.0}, source="diffmean")
    # 3 concepts × 3 prompts × 5 rows = 45 rows × 20 tokens: 3× the earlier 30 × 10
    args = ["run", "--dry-run", "--concepts", "3", "--max-new-tokens", "20",
            "--set", f"tracking.experiment={experiment}"]  # fmt: skip
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.stderr
    plan = json.loads(out.stdout)
    assert (plan["device"], plan["dtype"], plan["layer"], plan["batch_size"]) == (
        "cpu", "float32", 9, "96"
    )  # fmt: skip
    assert plan["model"]["n_layers"] == 18 and plan["model"]["found_in"] == "embedded"
    assert plan["stages"][:2] == ["model_load", "classifiers"] and "generation" in plan["stages"]
    assert plan["estimate"]["run_id"] == ours and plan["estimate"]["scale"] == pytest.approx(3.0)
    assert plan["estimated_seconds"] == pytest.approx(4 + 6 + 3 * (30 + 10))
    text = _said(runner.invoke(app, args))
    assert "device cpu, dtype float32, layer 9 of 0..17, batch size 96" in text
    assert "stages: model_load → classifiers → vectors" in text
    assert "about 2.2 min, the 4 stages of run 'same model and device'" in text
    assert "scaled ×3.00" in text
    # each stage as this plan would take it: the per-row ones scaled, the fixed ones not
    assert "model_load 4 s, classifiers 6 s, generation 90 s, embedding 30 s" in text
    assert plan["estimate"]["scaled_stages"]["generation"] == pytest.approx(90.0)
    assert "ran with load" not in text and plan["estimate"]["load"] is None


def test_a_reference_that_ran_under_load_is_a_last_resort_and_said(mlflow_store, tmp_path):
    experiment = "dry-run-load"
    args = ["run", "--dry-run", "--concepts", "2", "--set", f"tracking.experiment={experiment}"]
    calm = _earlier_run(experiment, tmp_path, "calm", {"generation": 30.0}, load=(1.5, 4))
    busy = _earlier_run(experiment, tmp_path, "busy", {"generation": 60.0}, load=(12.0, 4))
    plan = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert plan["estimate"]["run_id"] == calm and plan["estimate"]["under_load"] is False
    assert "ran with load" not in _said(runner.invoke(app, args))
    tracking.client().delete_run(calm)
    plan = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert plan["estimate"]["run_id"] == busy and plan["estimate"]["under_load"] is True
    assert "the reference ran with load 12.00 on 4 cores" in _said(runner.invoke(app, args))


def test_a_run_records_the_load_it_started_with(mlflow_store, tmp_path, tiny_lm):
    """``RunSession.start`` tags a new run with the machine's load and CPU count."""
    import os

    from experiments.config import load_config
    from experiments.kernel.lifecycle import RunSession
    from experiments.timer import Timer

    config = load_config("configs/phase5.yaml", [f"tracking.results_dir={tmp_path}"])
    session = RunSession(config, None, Timer(), tiny_lm, None)
    with session._stack:
        run_id, new = session.start("dry-run-load-tags", "tagged", tmp_path)
    tags = tracking.get_run(run_id).data.tags
    assert new and int(tags[CPUS_TAG]) == os.cpu_count()
    assert float(tags[LOAD_TAG]) >= 0.0 and tags[MODEL_TAG] == tiny_lm.model_id


def test_a_resumed_run_is_no_reference_and_a_reopened_session_marks_it(
    mlflow_store, tmp_path, tiny_lm
):
    """A resumed run's record times only what ran after the resume: the plan leaves it
    out and says so. ``RunSession.start`` on an existing run tags it reopened; a run from
    before the tag is known by its command line."""
    from experiments.config import load_config
    from experiments.kernel.lifecycle import RunSession
    from experiments.timer import Timer
    from experiments.tracking.context import COMMAND_TAG, REOPENED_TAG

    experiment = "dry-run-reopened"
    args = ["run", "--dry-run", "--concepts", "2", "--set", f"tracking.experiment={experiment}"]
    whole = _earlier_run(experiment, tmp_path, "whole", {"generation": 30.0})
    part = _earlier_run(experiment, tmp_path, "resumed", {"generation": 3.0})
    tracking.client().set_tag(part, COMMAND_TAG, f"steer-eval run --resume {part}")
    plan = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert plan["estimate"]["run_id"] == whole  # the newer, resumed one is passed over
    tracking.client().delete_run(whole)
    text = _said(runner.invoke(app, args))
    assert "no estimate" in text and "1 resumed or rescored" in text
    config = load_config("configs/phase5.yaml", [f"tracking.results_dir={tmp_path}"])
    fresh = _earlier_run(experiment, tmp_path, "fresh", {"generation": 30.0})
    folder = RunDir(tmp_path, fresh)
    session = RunSession(config, None, Timer(), tiny_lm, None, existing=fresh, run_dir=folder)
    with session._stack:
        run_id, new = session.start(experiment, "fresh", tmp_path)
    assert not new and tracking.get_run(run_id).data.tags[REOPENED_TAG] == "true"
    assert "1 resumed or rescored" not in _said(runner.invoke(app, args))
    assert "2 resumed or rescored" in _said(runner.invoke(app, args))


def test_without_a_run_of_this_model_on_this_device_there_is_no_estimate(mlflow_store, tmp_path):
    experiment = "dry-run-no-estimate"
    _earlier_run(experiment, tmp_path, "on a card", {"generation": 1.0}, device="cuda")
    _earlier_run(experiment, tmp_path, "other vectors", {"generation": 1.0}, source="diffmean")
    args = ["run", "--dry-run", "--concepts", "2", "--set", f"tracking.experiment={experiment}"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.stderr
    assert f"no estimate: no finished run of {EMBEDDED_ID} on cpu with classifier vectors" in (
        _said(out)
    )


def test_a_layer_out_of_range_is_refused_from_the_config(mlflow_store):
    out = runner.invoke(app, ["run", "--dry-run", "--layer", "99"])
    assert out.exit_code == 2
    assert "layer 99 is out of range for embedded:gemma-3-270m, which has 18 decoder layers" in (
        _said(out)
    )
    assert "rows" not in out.stdout


def test_a_missing_hub_model_is_refused_with_the_download_line(mlflow_store, tmp_path, monkeypatch):
    for folder in ("configs", "data"):  # a checkout without models/ (and an empty HF cache)
        (tmp_path / folder).symlink_to(REPO / folder)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    out = runner.invoke(app, ["run", "--dry-run", "--model", "google/gemma-3-4b-pt"])
    assert out.exit_code == 2
    said = _said(out)
    assert (
        "HF_HUB_OFFLINE=0 .venv/bin/hf download google/gemma-3-4b-pt --local-dir "
        "models/gemma-3-4b-pt" in said
    )
    assert "licence-gated" in said


def test_the_4b_dummy_plan_reads_its_config_without_weights(mlflow_store):
    args = ["run", "--dry-run", "--model", "google/gemma-3-4b-pt", "--set",
            "model_load_format=dummy", "--layer", "17", "--json"]  # fmt: skip
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["model"]["model_id"] == "dummy:gemma-3-4b-pt"
    assert plan["model"]["architecture"] == "Gemma3ForConditionalGeneration"
    assert plan["model"]["n_layers"] == 34 and plan["layer"] == 17


@pytest.fixture
def old_card(monkeypatch):
    """torch reports a CUDA card without bf16 (compute capability 7.5)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))


def test_a_dtype_the_card_cannot_run_is_refused(mlflow_store, old_card):
    args = ["run", "--dry-run", "--set", "device=cuda", "--set", "dtype=bfloat16"]
    out = runner.invoke(app, args)
    assert out.exit_code == 2
    said = _said(out)
    assert "dtype bfloat16: the card cuda (Tesla T4, compute capability 7.5) has no bf16" in said
    assert "--set dtype=float16" in said


def test_auto_on_a_card_without_bf16_is_fp16_and_the_batch_is_sized_at_load(mlflow_store, old_card):
    args = ["run", "--dry-run", "--set", "device=cuda", "--set", "generation.batch_size=auto"]
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["dtype"] == "float16" and plan["device"] == "cuda"
    assert plan["batch_size"].startswith("auto: from the card's free memory")


def test_calibrate_and_identify_check_the_same_way(mlflow_store):
    out = runner.invoke(app, ["calibrate", "--quick", "--dry-run", "--set", "layer=40"])
    assert out.exit_code == 2 and "layer 40 is out of range" in _said(out)
    out = runner.invoke(app, ["identify", "--quick", "--dry-run", "--json"])
    assert out.exit_code == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["phase"] == "6-identify" and plan["stages"][1] == "activations"
    assert plan["layer"] == 9 and plan["device"] == "cpu"
    out = runner.invoke(app, ["calibrate", "--quick", "--dry-run"])
    assert out.exit_code == 0, out.stderr
    assert "stages: model_load → mlflow_open → centroids → classifiers" in _said(out)


def _range(low: float, high: float, layer: int = 9, source: str = "classifier"):
    from experiments.strength_range import StrengthLimits, StrengthRange, Unsteered

    return StrengthRange(
        model_id=EMBEDDED_ID, layer=layer, mode="additive", vector_source=source, alpha=1.0,
        grid=[low, high], concepts=["dog.n.01"], prompts=4, max_new_tokens=6, seed=0,
        limits=StrengthLimits(),
        unsteered=Unsteered(perplexity=20.0, near_empty=0.0, distinct_2=1.0),
        steps=[], low=low, high=high, beta=high,
    )  # fmt: skip


def test_the_plan_says_where_beta_would_come_from_and_refuses_auto_without_a_range(
    mlflow_store, tmp_path
):
    from experiments.config import load_config
    from experiments.kernel.lifecycle import load_graph
    from experiments.kernel.probes import classifier_dir, graph_key
    from experiments.strength_range import save_range

    where = ["--set", f"classifier.dir={tmp_path}"]
    out = runner.invoke(app, ["run", "--dry-run", *where, "--set", "steering.beta=auto"])
    assert out.exit_code == 2 and "no range is recorded" in _said(out)
    config = load_config("configs/phase5.yaml", [f"classifier.dir={tmp_path}"])
    folder = classifier_dir(config, EMBEDDED_ID, 9, graph_key(load_graph(config)))
    save_range(folder, _range(0.05, 0.1))
    out = runner.invoke(app, ["run", "--dry-run", "--json", *where, "--set", "steering.beta=auto"])
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)["strength"][0].startswith("β auto: 0.1, the top of the recorded")
    # the config's own model keeps its β (make run never changes), with a warning
    text = _said(runner.invoke(app, ["run", "--dry-run", *where]))
    assert "β 0.2 given for this model" in text and "kept although outside" in text
    # one rule whether the model is named or defaulted: the same model, the same β
    for named in (["--model", "embedded"], ["--set", "model=embedded"]):
        out = runner.invoke(app, ["run", "--dry-run", "--json", *where, *named])
        assert out.exit_code == 0, out.stderr
        (line,) = json.loads(out.stdout)["strength"]
        assert line.startswith("β 0.2 given for this model") and "kept although" in line


def test_calibrate_and_identify_plans_say_what_the_recorded_range_does(mlflow_store, tmp_path):
    from experiments.strength_range import save_range

    save_range(tmp_path / "a-set", _range(0.05, 0.1))
    save_range(tmp_path / "b-set", _range(0.01, 0.05, source="diffmean"))
    where = ["--set", f"classifier.dir={tmp_path}"]
    text = _said(runner.invoke(app, ["calibrate", "--quick", "--dry-run", *where]))
    # the quick grid [0.1, 0.2] kept to 0.05-0.1 for the classifier's directions
    assert "L9-classifier: β 0.2 given for this model" in text
    assert "held-out β grid [0.1]" in text
    out = runner.invoke(app, ["identify", "--quick", "--dry-run", "--json", *where])
    assert out.exit_code == 0, out.stderr
    (note,) = json.loads(out.stdout)["strength"]
    assert "outside coherent β 0.01-0.05" in note and "kept as the config gives it" in note


def _concepts(n: int) -> list[tuple[str, str]]:
    from experiments.config import load_config
    from experiments.kernel.lifecycle import load_graph

    graph = load_graph(load_config("configs/phase5.yaml", [f"concepts.limit={n}"]))
    return [(c.synset, c.name) for c in graph.concepts]


def _dry_run_with(path, *extra: str):
    return runner.invoke(app, [
        "run", "--dry-run", "--concepts", "2", *extra,
        "--set", "steering.vector_source=file", "--set", f"steering.vector_file={path}",
    ])  # fmt: skip


def test_a_vector_file_is_read_and_checked_as_the_run_would(mlflow_store, tmp_path):
    """The dry run reads the file with the run's own validator: the model's hidden size
    from its config (640), the layer (9), every concept; the run's messages, exit 2."""
    from steering.vector_files import VectorFileError, read_vectors, write_control_vector

    (a, _), (b, _) = _concepts(2)
    rng = np.random.default_rng(0)
    good = tmp_path / "good"
    good.mkdir()
    for synset in (a, b):
        np.save(good / f"{synset}.npy", rng.normal(size=640).astype(np.float32))
    out = _dry_run_with(good, "--json")
    assert out.exit_code == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["model"]["model_type"] == "gemma3_text"  # what a GGUF's model_hint names
    (line,) = plan["vectors"]
    assert line == f"vectors: 2 concepts read from {good} and checked (hidden size 640, layer 9)"
    assert "and checked (hidden size 640, layer 9)" in _said(_dry_run_with(good))

    def refused(folder, *extra: str) -> str:
        out = _dry_run_with(folder, *extra)
        assert out.exit_code == 2, out.stdout
        assert "plan:" not in out.stdout
        return _said(out)

    wrong = tmp_path / "wrong"
    wrong.mkdir()
    for synset in (a, b):
        np.save(wrong / f"{synset}.npy", np.ones(641, np.float32))
    with pytest.raises(VectorFileError) as real:  # the real read's message, word for word
        read_vectors(wrong, [a, b], ["x", "y"], 640, 9)
    assert f"error: {real.value}" in refused(wrong)
    assert "the model's hidden size is 640" in refused(wrong)

    short = tmp_path / "short"
    short.mkdir()
    np.save(short / f"{a}.npy", np.ones(640, np.float32))
    assert f"no vector for {b}" in refused(short)

    layers = tmp_path / "layers"
    layers.mkdir()
    for synset in (a, b):
        write_control_vector(layers / f"{synset}.gguf", {3: np.ones(640, np.float32)}, "x")
    text = refused(layers)
    assert "no direction.9 for this run's layer 9 (the file has layers [3])" in text
    out = _dry_run_with(layers, "--layer", "3", "--json")  # at its layer it plans
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)["layer"] == 3


def test_a_repeng_file_of_another_model_and_many_layers_is_said_in_the_plan(mlflow_store, tmp_path):
    from steering.vector_files import write_control_vector

    (a, _), (b, _) = _concepts(2)
    folder = tmp_path / "repeng"
    folder.mkdir()
    for synset in (a, b):
        layers = {la: np.ones(640, np.float32) for la in range(1, 18)}
        write_control_vector(folder / f"{synset}.gguf", layers, "llama")
    out = _dry_run_with(folder, "--json")
    assert out.exit_code == 0, out.stderr
    said = json.loads(out.stdout)["vectors"]
    assert said[1].endswith("took direction.9 (this run's layer) of the 17 layers each "
                            "holds; the other 16 were ignored (steering.layers: file "
                            "steers them all)")  # fmt: skip
    assert "controlvector.model_hint is 'llama', but the model is 'gemma3_text'" in said[2]


def test_a_repeng_file_as_deployed_is_planned_at_every_layer_and_its_own_norm(
    mlflow_store, tmp_path
):
    """``steering.layers: file, scale: file``: the plan names every layer the files hold
    and the coefficient, a hint of the same family (gemma3) is not warned about, and a
    layer range without the run's layer is refused before any weights load."""
    from steering.vector_files import write_control_vector

    (a, _), (b, _) = _concepts(2)
    folder = tmp_path / "repeng"
    folder.mkdir()
    for synset in (a, b):
        layers = {la: np.ones(640, np.float32) for la in range(1, 18)}
        write_control_vector(folder / f"{synset}.gguf", layers, "gemma3")
    deployed = ("--set", "steering.layers=file", "--set", "steering.scale=file")
    out = _dry_run_with(folder, *deployed, "--set", "steering.coefficient=2", "--json")
    assert out.exit_code == 0, out.stderr
    plan = json.loads(out.stdout)
    head, note = plan["vectors"]  # no hint warning: gemma3 is gemma3_text's family
    assert head.endswith(
        f"layer 9); steering layers {list(range(1, 18))} at the file's norms × coefficient 2"
    )
    assert note.endswith("steering 17 of the 17 layers each holds, "
                         f"{list(range(1, 18))} (steering.layers: file)")  # fmt: skip
    assert any("no β: steering.scale file" in line for line in plan["strength"])
    out = _dry_run_with(folder, "--set", "steering.layers=[10, 12]", "--json")
    assert out.exit_code == 2
    said = " ".join(out.output.split())  # as one line, whatever the terminal's width
    assert "this run's layer 9 is not among the layers steering.layers [10, 12]" in said


def test_identify_gives_each_stages_cost_per_concept_and_the_shard_a_budget_holds(
    mlflow_store, tmp_path
):
    """From an earlier identify run of this model on this device: its timings over its
    concepts (model loading and MLflow paid once per run; the record's total no stage)."""
    experiment = "dry-run-identify-costs"
    folder = tmp_path / "identify-run"
    folder.mkdir()
    timings = {"model_load": 30.0, "directions": 200.0, "likelihood": 1000.0,
               "mlflow_parent": 30.0, "total": 1260.0}  # fmt: skip
    record = {
        "timings": timings,
        "model_id": EMBEDDED_ID,
        "config": {
            "concepts": {"synsets": [f"c{i}.n.01" for i in range(10)]},
            "generation": {"max_new_tokens": 24},
            "steering": {"vector_source": "diffmean"},
        },
    }
    (folder / "analysis.json").write_text(json.dumps(record))
    tags = {"phase": "6-identify", HOST_TAG: platform.node(), DEVICE_TAG: "cpu",
            MODEL_TAG: EMBEDDED_ID, RUN_DIR_TAG: str(folder)}  # fmt: skip
    tracking.end_run(tracking.start_run(experiment, "identify dev", tags=tags))
    args = ["identify", "--quick", "--dry-run", "--set", f"identify.experiment={experiment}"]
    out = runner.invoke(app, [*args, "--json", "--budget-minutes", "120"])
    assert out.exit_code == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["estimated_seconds"] == pytest.approx(1260.0)  # the total not counted twice
    costs = plan["stage_costs"]
    assert costs["per_concept_seconds"] == {"directions": 20.0, "likelihood": 100.0}
    assert costs["fixed_seconds"] == {"model_load": 30.0, "mlflow_parent": 30.0}
    assert costs["shard_size"] == 59  # (7200 - 60) / 120
    text = _said(runner.invoke(app, args))
    assert "cost per concept (from " in text and "likelihood 100.0 s, directions 20.0 s" in text
    assert "shard size for a 150-minute budget: 74 concepts" in text
