"""Bring your own direction and hand ours on, end to end on the embedded 270M model:
a run exported as GGUF control vectors (read back with the gguf package), re-imported
with ``vector_source: file`` (the same texts and Δ, bit for bit), and someone else's
random ``.npy`` vectors run with their own detection metrics."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from experiments.cli import app
from experiments.config import load_config
from experiments.phase5.run import run_phase5
from experiments.rundir import RunDir

pytestmark = pytest.mark.integration


def small_config(tmp_path, *extra: str):
    return load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=2",
            "generation.max_new_tokens=8",
            "generation.batch_size=6",
            "tracking.traces=false",
            f"classifier.dir={tmp_path / 'classifiers'}",
            f"tracking.results_dir={tmp_path / 'results'}",
            *extra,
        ],
    )


def rows(result, name: str) -> dict[str, dict]:
    path = RunDir(result.results_dir.parent, result.run_id).file(name)
    return {r["key"]: r for r in map(json.loads, path.read_text().splitlines())}


@pytest.fixture(scope="module")
def original(tmp_path_factory, mlflow_store, embedded_lm, embedder):
    tmp = tmp_path_factory.mktemp("roundtrip")
    return tmp, run_phase5(small_config(tmp), lm=embedded_lm, embedder=embedder)


@pytest.fixture(scope="module")
def exported(original):
    tmp, result = original
    out = tmp / "export"
    reply = CliRunner().invoke(
        app,
        ["export", result.run_id, "--out", str(out), "--results-dir", str(tmp / "results")],
    )
    assert reply.exit_code == 0, reply.output
    return out


def test_without_out_the_export_goes_to_a_folder_named_after_the_run(original, exported):
    _, result = original
    folder = Path("exports") / result.run_id  # beside the run's relative concept file
    assert not folder.exists()
    try:
        reply = CliRunner().invoke(app, ["export", result.run_id, "--json"])
        assert reply.exit_code == 0, reply.output
        assert json.loads(reply.stdout)["folder"] == str(folder)
        written = sorted(p.name for p in folder.iterdir())
        assert written == sorted(p.name for p in exported.iterdir())
        assert json.loads((folder / "export.json").read_text())["run_id"] == result.run_id
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()  # only when nothing else is there


def test_the_export_is_a_control_vector_of_what_the_run_added(original, exported):
    from gguf import GGUFReader
    from safetensors.numpy import load_file

    _, result = original
    record = result.record
    manifest = json.loads((exported / "export.json").read_text())
    assert manifest["layer"] == record.layer == 9 and manifest["model_id"] == record.model_id
    mapping = load_file(str(exported / "directions.safetensors"))
    for synset, scale in manifest["scales"].items():
        assert scale == pytest.approx(record.alpha * record.beta)
        reader = GGUFReader(exported / f"{synset}.gguf")
        assert reader.get_field("general.architecture").contents() == "controlvector"
        assert reader.get_field("steer_eval.layer").contents() == 9
        assert reader.get_field("controlvector.model_hint").contents() == "gemma3_text"
        (tensor,) = reader.tensors
        assert tensor.name == "direction.9" and tensor.data.dtype == np.float32
        unit = np.asarray(reader.get_field("steer_eval.unit_direction").contents(), np.float32)
        # llama.cpp at scale 1 adds exactly what the run's hook added at s = +1
        added = np.float32(np.float32(record.alpha * record.beta)) * unit
        assert np.array_equal(tensor.data, added)
        assert np.array_equal(mapping[synset], tensor.data)
        cosine = float(tensor.data @ unit / np.linalg.norm(tensor.data) / np.linalg.norm(unit))
        assert cosine > 1 - 1e-6


def test_reimporting_the_export_gives_the_same_texts_and_delta(
    original, exported, embedded_lm, embedder
):
    tmp, result = original
    config = small_config(tmp, "steering.vector_source=file", f"steering.vector_file={exported}")
    again = run_phase5(config, lm=embedded_lm, embedder=embedder)
    g1, g2 = rows(result, RunDir.GENERATIONS), rows(again, RunDir.GENERATIONS)
    s1, s2 = rows(result, RunDir.SCORES), rows(again, RunDir.SCORES)
    assert g1.keys() == g2.keys()
    assert all(g1[k]["text"] == g2[k]["text"] and g1[k]["nll"] == g2[k]["nll"] for k in g1)
    assert all(s1[k]["delta"] == s2[k]["delta"] for k in s1)
    assert again.record.config.steering.vector_source == "file"
    # one layer, our own model's hint: the import had nothing to say, and the record says so
    assert again.record.diagnostics["imported_vectors"] == []
    assert "imported_vectors" not in result.record.diagnostics
    # the imported direction is the probe's, so it detects exactly as well
    for synset, metrics in again.record.predictors.items():
        assert metrics["auroc"] == pytest.approx(result.record.predictors[synset]["auroc"])


def test_someone_elses_random_vectors_run_with_their_own_detection_metrics(
    original, embedded_lm, embedder
):
    tmp, result = original
    folder = tmp / "random"
    folder.mkdir()
    rng = np.random.default_rng(40)
    for synset in result.record.predictors:
        v = rng.normal(size=embedded_lm.hidden_size)
        np.save(folder / f"{synset}.npy", v / np.linalg.norm(v))
    config = small_config(tmp, "steering.vector_source=file", f"steering.vector_file={folder}")
    other = run_phase5(config, lm=embedded_lm, embedder=embedder)
    record = other.record
    for synset, metrics in record.predictors.items():
        probe = result.record.predictors[synset]
        assert 0.0 <= metrics["auroc"] <= 1.0
        assert metrics["auroc"] != pytest.approx(probe["auroc"])  # its own, not the probe's
        assert len(record.detection[synset]["test_scores"]) == metrics["n_eval"]
    keys = set(record.criteria)
    assert {"v2_effect_above_null_pos", "v2_specificity_pos"} <= keys
    assert rows(other, RunDir.GENERATIONS).keys() == rows(result, RunDir.GENERATIONS).keys()


def test_a_vector_of_the_wrong_size_stops_the_run_before_generating(
    original, embedded_lm, embedder
):
    from steering.vector_files import VectorFileError

    tmp, result = original
    folder = tmp / "wrong"
    folder.mkdir()
    for synset in result.record.predictors:
        np.save(folder / f"{synset}.npy", np.ones(embedded_lm.hidden_size + 1))
    config = small_config(tmp, "steering.vector_source=file", f"steering.vector_file={folder}")
    with pytest.raises(VectorFileError, match="hidden size is 640"):
        run_phase5(config, lm=embedded_lm, embedder=embedder)


@pytest.mark.judge
def test_the_export_steers_llama_cpp_as_the_hook_steers_the_model(original):
    tmp, result = original
    out = tmp / "checked"
    reply = CliRunner().invoke(
        app,
        [
            *("export", result.run_id, "--out", str(out), "--results-dir", str(tmp / "results")),
            *("--check", "--concepts", "1", "--json"),
        ],
    )
    assert reply.exit_code == 0, reply.output
    check = json.loads(reply.stdout)["check"]
    assert json.loads((out / "check.json").read_text()) == check
    (concept,) = check["concepts"]
    assert concept in json.loads((out / "export.json").read_text())["gguf"]
    # 3 on-concept texts and their 3 paired off-concept texts, at both signs
    assert len(check["texts"][concept]) == 6 and check["n_shifts"] == 12
    assert check["layer"] == 9 and check["gguf"].endswith("gemma-3-270m-q4_k_m.gguf")
    # the quantised GGUF and the fp32 model move the NLL alike: same shifts, slope near 1
    assert check["passed"] and check["r"] >= 0.95
    assert 0.8 < check["slope"] < 1.25
    for sign in ("+1", "-1"):
        assert 0.8 < check["by_sign"][sign]["slope"] < 1.25
    assert any(abs(s["hook"]) > 0.05 for s in check["shifts"])  # it did steer


def test_a_file_llama_cpp_would_refuse_is_refused_before_any_model_loads(original, exported):
    from experiments.phase5.export_check import check_export
    from steering.assets import embedded_gguf_path
    from steering.vector_files import VectorFileError, read_control_vector, write_control_vector

    tmp, _ = original
    folder = tmp / "layer0"
    shutil.copytree(exported, folder)
    concepts = sorted(json.loads((folder / "export.json").read_text())["gguf"])
    concept = concepts[0]
    (vector,) = read_control_vector(folder / f"{concept}.gguf").directions.values()
    write_control_vector(folder / f"{concept}.gguf", {17: vector[:100]}, "gemma3_text")

    def no_model():
        raise AssertionError("the model was loaded for a file llama.cpp refuses")

    with pytest.raises(VectorFileError, match=r"100 wide, but the model's n_embd is 640"):
        check_export(
            folder, no_model, embedded_gguf_path(), {c: ["A dog barked."] for c in concepts}
        )


def recipe() -> str:
    """The Python recipe of docs/vectors.md, as the page shows it."""
    page = (Path(__file__).parents[3] / "docs" / "vectors.md").read_text()
    after = page.split("<!-- recipe: apply_control_vector", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.judge
def test_the_documented_python_recipe_applies_an_export_as_the_check_does(original, exported):
    from experiments.phase5.export_check import llama_nll, set_cvec
    from judges.llama_runtime import check_decodes, open_llama
    from steering.assets import embedded_gguf_path
    from steering.vector_files import read_control_vector

    code = recipe()
    assert len(code.strip().splitlines()) <= 15
    namespace: dict = {}
    exec(compile(code, "docs/vectors.md", "exec"), namespace)
    apply_control_vector = namespace["apply_control_vector"]
    concept = sorted(json.loads((exported / "export.json").read_text())["gguf"])[0]
    path = exported / f"{concept}.gguf"
    gguf = embedded_gguf_path()
    check_decodes(gguf)
    llm = open_llama(gguf, n_ctx=64, logits_all=True, seed=0, verbose=False)
    try:
        ids = llm.tokenize(b"The bus stop on the corner was moved last year.", add_bos=True)
        nll = {}
        set_cvec(llm, None)
        nll["none"] = llama_nll(llm, ids, 1)
        for sign in (1.0, -1.0):
            apply_control_vector(llm, str(path), sign)
            nll[f"recipe {sign:+g}"] = llama_nll(llm, ids, 1)
            set_cvec(llm, read_control_vector(path).directions, sign)
            nll[f"check {sign:+g}"] = llama_nll(llm, ids, 1)
    finally:
        llm.close()
    for sign in ("+1", "-1"):
        assert nll[f"recipe {sign}"] == pytest.approx(nll[f"check {sign}"], abs=1e-6)
        assert abs(nll[f"recipe {sign}"] - nll["none"]) > 1e-3  # it steers
