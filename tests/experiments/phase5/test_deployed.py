"""Vectors evaluated as deployed, end to end on the tiny random Gemma 3: a repeng-convention
GGUF of several layers steered at every layer it holds at its own norm × a coefficient
(``steering.layers: file, scale: file``), beside the same file at one layer; the record,
parameters and answer name the intervention exactly; the export holds what the hooks
added at each layer; a range steers only its layers; and the defaults hash as before."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
import torch

from experiments import tracking
from experiments.config import ConfigError, apply_overrides, load_config
from experiments.kernel.lifecycle import load_graph
from experiments.phase5.export import export_run
from experiments.phase5.run import run_phase5
from experiments.rundir import RunDir
from steering.activations import layer_output_tensor
from steering.vector import RowSteering
from steering.vector_files import read_control_vector, write_control_vector

K = 2.0  # repeng's coefficient
FILE_LAYERS = (1, 2, 3)  # the tiny Gemma's blocks 1-3 (of 0-3); the run's layer is 2


def tiny(tmp, vectors, tiny_phase5_config, *extra: str):
    """The tiny Phase 5 config (layer 2, 2 concepts) steering the files in ``vectors``,
    with ``extra`` overrides (``--set`` syntax)."""
    base = tiny_phase5_config(tmp, "concepts.limit=2")
    data = apply_overrides(
        base.model_dump(mode="json"),
        ["steering.vector_source=file", f"steering.vector_file={vectors}", *extra],
    )
    return type(base).model_validate(data)


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_phase5_config):
    """One repeng-layout GGUF per concept (a vector per layer, each of its own norm, the
    model hint ``gemma3``: the multimodal Gemma 3's type, the same family)."""
    tmp = tmp_path_factory.mktemp("deployed")
    graph = load_graph(tiny_phase5_config(tmp, "concepts.limit=2"))
    folder = tmp / "vectors"
    folder.mkdir()
    rng = np.random.default_rng(11)
    held = {}
    for c in graph.concepts:
        held[c.synset] = {
            n: (rng.normal(size=64) * (1.5 + 0.5 * n)).astype(np.float32) for n in FILE_LAYERS
        }
        write_control_vector(folder / f"{c.synset}.gguf", held[c.synset], "gemma3")
    return tmp, folder, held


@pytest.fixture(scope="module")
def runs(files, mlflow_store, tiny_lm, embedder, single_threaded, tiny_phase5_config):
    """The same files at every layer they hold, and at the run's layer alone (both at the
    file's norms × K)."""
    tmp, folder, _ = files
    everywhere = tiny(
        tmp / "all", folder, tiny_phase5_config, "steering.layers=file", "steering.scale=file",
        f"steering.coefficient={K}",
    )  # fmt: skip
    one = tiny(
        tmp / "one", folder, tiny_phase5_config, "steering.scale=file", f"steering.coefficient={K}"
    )
    with single_threaded():
        return (
            run_phase5(everywhere, lm=tiny_lm, embedder=embedder),
            run_phase5(one, lm=tiny_lm, embedder=embedder),
        )


def texts(result) -> dict[str, dict]:
    path = RunDir(result.results_dir.parent, result.run_id).file(RunDir.GENERATIONS)
    return {r["key"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_the_record_and_the_answer_name_the_intervention_exactly(runs, files):
    everywhere, one = runs
    _, _, held = files
    found = everywhere.record.diagnostics["intervention"]
    assert found["layers"] == [1, 2, 3] and found["scale"] == "file"
    assert found["coefficient"] == K and found["layer"] == 2
    for synset, layers in held.items():
        for n, v in layers.items():
            norm = float(np.linalg.norm(v.astype(np.float64)))
            assert found["norms"][synset][str(n)] == pytest.approx(norm)
            # β_l = k·‖v_l‖/α_l: the fraction of layer l's residual norm added at s = 1
            beta = K * norm / found["alphas"][str(n)]
            assert found["betas"][synset][str(n)] == pytest.approx(beta)
    assert found["alphas"]["2"] == pytest.approx(everywhere.record.alpha)
    answer = (everywhere.results_dir / RunDir.ANSWER).read_text()
    assert "at layers 1, 2, 3 in one pass with the file's own vectors, h_l += s·2·v_l" in answer
    assert "steering.scale: file, coefficient 2; at layer 2" in answer
    assert (
        "at layer 2 with the file's own vector, h += s·2·v"
        in (one.results_dir / RunDir.ANSWER).read_text()
    )
    params = tracking.get_run(everywhere.run_id).data.params
    assert params["steered_layers"] == "[1, 2, 3]" and params["scale"] == "file"
    assert params["coefficient"] == "2.0" and params["config.steering.layers"] == "file"
    assert "L2 all file layers file k=2" in tracking.get_run(everywhere.run_id).info.run_name
    # the hint gemma3 is gemma3_text's family: nothing said about another model
    assert not any("model_hint" in n for n in everywhere.record.diagnostics["imported_vectors"])


def test_every_layer_moves_the_texts_and_the_unsteered_twins_stay_the_same(runs):
    everywhere, one = runs
    a, b = texts(everywhere), texts(one)
    assert a.keys() == b.keys()
    unsteered = [k for k, r in a.items() if r["strength"] == 0]
    steered = [k for k, r in a.items() if r["strength"] != 0]
    assert unsteered and all(a[k]["text"] == b[k]["text"] for k in unsteered)
    # layers 1 and 3 added on top of layer 2 change what is written
    assert sum(a[k]["text"] != b[k]["text"] for k in steered) > len(steered) // 2
    assert one.record.diagnostics["intervention"]["layers"] == [2]


def test_the_export_holds_what_the_hooks_added_at_every_layer(runs, files, tmp_path):
    everywhere, _ = runs
    _, _, held = files
    folder = RunDir(everywhere.results_dir.parent, everywhere.run_id)
    done = export_run(folder, tmp_path / "export")
    assert done.layers == [1, 2, 3]
    manifest = json.loads((tmp_path / "export" / "export.json").read_text())
    assert manifest["layers"] == [1, 2, 3]
    for synset, layers in held.items():
        cv = read_control_vector(tmp_path / "export" / done.files[synset])
        assert sorted(cv.directions) == [1, 2, 3]
        for n, v in layers.items():  # s = +1: k·v_l, as llama.cpp's --control-vector adds
            assert np.array_equal(
                cv.directions[n], (torch.tensor([K]) * torch.from_numpy(v)).numpy()
            )
        assert cv.metadata["steer_eval.layers"] == "1,2,3"
        want = K * float(np.linalg.norm(layers[2].astype(np.float64)))
        assert done.scales[synset] == pytest.approx(want, rel=1e-6)  # α·β at the run's layer


def test_the_null_has_the_concepts_norm_at_every_layer_in_other_directions(
    files, tiny_lm, tiny_phase5_config, one_thread
):
    from experiments.kernel.classifiers import ensure_classifiers
    from experiments.kernel.vectors import build_vectors

    tmp, folder, held = files
    cfg = tiny(
        tmp / "all", folder, tiny_phase5_config, "steering.layers=file", "steering.scale=file",
        f"steering.coefficient={K}",
    )  # fmt: skip
    graph = load_graph(cfg)
    probes = ensure_classifiers(cfg, tiny_lm, graph, 2)
    vectors = build_vectors(cfg, tiny_lm, graph, probes, 2)
    assert vectors.layers == (1, 2, 3)
    for synset, layers in held.items():
        (null,) = vectors.random[synset]
        assert null.coefficient == K and null.layers == (1, 2, 3)
        for n, v in layers.items():
            r = null.per_layer[n].double()
            assert float(r.norm()) == pytest.approx(float(np.linalg.norm(v)), rel=1e-5)
            cos = float(r @ torch.from_numpy(v).double()) / float(r.norm()) / np.linalg.norm(v)
            assert abs(cos) < 0.6  # a random direction, not the concept's
        steered = vectors.steered([synset, f"{synset}|random:0"])
        assert steered.shape == (2, 3, 64)


def test_a_range_steers_only_its_layers(files, tiny_lm, tiny_phase5_config, one_thread):
    from experiments.kernel.classifiers import ensure_classifiers
    from experiments.kernel.vectors import build_vectors

    tmp, folder, held = files
    cfg = tiny(
        tmp / "range", folder, tiny_phase5_config, "steering.layers=[2, 3]", "steering.scale=file"
    )
    graph = load_graph(cfg)
    vectors = build_vectors(cfg, tiny_lm, graph, ensure_classifiers(cfg, tiny_lm, graph, 2), 2)
    assert vectors.layers == (2, 3)
    assert vectors.intervention is not None and vectors.intervention.layers == (2, 3)
    synset = graph.concepts[0].synset
    vector = vectors.vectors[synset]
    added: dict[int, torch.Tensor] = {}  # per layer: its output after the hooks minus before

    def before(_m, _i, out, n):
        added[n] = -layer_output_tensor(out).detach().clone()

    def after(_m, _i, out, n):
        added[n] += layer_output_tensor(out).detach()

    enc = tiny_lm.tokenizer(["tell me about the dog ."], return_tensors="pt")
    with torch.inference_mode(), vector.apply(tiny_lm, 1.0):
        hooked = {
            n: sum(isinstance(h, RowSteering) for h in tiny_lm.layer(n)._forward_hooks.values())
            for n in range(tiny_lm.n_layers)
        }
        handles = []  # registered now: ``after`` runs after the steering hooks
        for n in range(tiny_lm.n_layers):
            layer = tiny_lm.layer(n)
            handles.append(layer.register_forward_hook(partial(before, n=n), prepend=True))
            handles.append(layer.register_forward_hook(partial(after, n=n)))
        try:
            tiny_lm.model(**enc)
        finally:
            for h in handles:
                h.remove()
    assert hooked == {0: 0, 1: 0, 2: 1, 3: 1}
    assert not added[0].any() and not added[1].any()  # layer 1 of the file is left out
    for n in (2, 3):  # scale file at the default coefficient 1: the file's vector itself
        torch.testing.assert_close(
            added[n][0], torch.from_numpy(held[synset][n]).expand_as(added[n][0])
        )


def test_what_as_deployed_refuses_and_what_it_leaves_unchanged(files, tiny_phase5_config):
    tmp, folder, _ = files
    base = tiny_phase5_config(tmp / "h", "concepts.limit=2")
    default = tiny(tmp / "h", folder, tiny_phase5_config)
    same = tiny(
        tmp / "h", folder, tiny_phase5_config, "steering.layers=auto", "steering.scale=unit"
    )
    assert default.config_hash() == same.config_hash() != base.config_hash()
    deployed = tiny(tmp / "h", folder, tiny_phase5_config, "steering.layers=file")
    assert deployed.config_hash() != default.config_hash()
    for extra, why in [
        (("steering.coefficient=2",), "coefficient is read with steering.scale: file"),
        (("steering.scale=file", "selection.mode=heldout"), "no β for held-out selection"),
        (("steering.layers=[3, 1]",), "0 ≤ first ≤ last"),
    ]:
        with pytest.raises((ConfigError, ValueError), match=why):
            tiny(tmp / "h", folder, tiny_phase5_config, *extra)
    with pytest.raises(ConfigError, match=r"set steering\.vector_source=file"):
        load_config("configs/phase5.yaml", ["steering.layers=file"])


@pytest.mark.integration
@pytest.mark.judge
def test_an_export_of_several_layers_steers_llama_cpp_as_the_hooks_steer_the_model(
    tmp_path, embedded_lm
):
    """``export --check`` on a file of seven layers (as a deployed run exports it: every
    steered layer's k·v_l): llama.cpp applying the whole file (its buffer rows 5-11, the
    layer range 6-12 both included) moves the NLL as the hooks on those seven layers do,
    and not as one of its layers alone does."""
    from experiments.phase5.export import MANIFEST
    from experiments.phase5.export_check import check_export
    from steering.assets import embedded_gguf_path

    rng = np.random.default_rng(5)
    # about 0.05 of each layer's median residual norm on the embedded model (α_6..α_12)
    norms = dict(zip(range(6, 13), (180, 260, 280, 330, 500, 580, 720), strict=True))
    directions = {}
    for n, norm in norms.items():
        v = rng.normal(size=640)
        directions[n] = (v / np.linalg.norm(v) * norm).astype(np.float32)
    write_control_vector(tmp_path / "dog.n.01.gguf", directions, "gemma3_text")
    one = tmp_path / "one"
    one.mkdir()
    write_control_vector(one / "dog.n.01.gguf", {9: directions[9]}, "gemma3_text")
    files = {"dog.n.01": "dog.n.01.gguf"}
    for folder, layers in ((tmp_path, list(norms)), (one, [9])):
        manifest = {"model_id": "embedded", "layer": 9, "layers": layers, "gguf": files}
        (folder / MANIFEST).write_text(json.dumps(manifest))
    texts = {
        "dog.n.01": [
            "The dog barked at the mailman all morning.",
            "A puppy chased its tail in the yard.",
            "The committee approved the budget after a long debate.",
        ]
    }
    checked = check_export(tmp_path, embedded_lm, embedded_gguf_path(), texts)
    assert checked.layers == list(range(6, 13))
    assert checked.passed and checked.overall.r >= 0.95
    assert 0.8 < checked.overall.slope < 1.25
    single = check_export(one, embedded_lm, embedded_gguf_path(), texts)
    assert single.passed and single.layers == [9]
    # seven layers move the NLL more than their layer 9 alone: the hooks steered them all
    many = np.mean([abs(s.hook) for s in checked.shifts])
    assert many > 1.5 * np.mean([abs(s.hook) for s in single.shifts])
    saved = json.loads((tmp_path / "check.json").read_text())
    assert saved["layers"] == list(range(6, 13)) and saved["passed"]
