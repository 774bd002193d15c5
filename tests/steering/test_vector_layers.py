"""Vectors as deployed: a repeng-convention GGUF of several layers applied at every layer
it holds (or a range), one hook per layer in one pass, at the file's own norm times a
coefficient; and a file's model hint read by family (tiny random Gemma 3)."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch

from steering.activations import layer_output_tensor
from steering.vector import RowSteering, SteeringVector, steer_layers
from steering.vector_files import (
    ModelKind,
    VectorFileError,
    read_layered_vectors,
    read_vectors,
    write_mapping,
)

HIDDEN = 64  # the tiny Gemma's width; it has 4 decoder layers (0-3)
FILE_LAYERS = (1, 2, 3)
PROMPTS = ["tell me about the dog .", "here is a story :", "cat"]

pytestmark = pytest.mark.usefixtures("one_thread")


def repeng_gguf(path, directions: dict[int, np.ndarray], model_hint: str = "gemma3_text"):
    """A control vector written as repeng's ``ControlVector.export_gguf`` writes it, with
    the gguf package directly (not our writer): architecture ``controlvector``, the model
    hint and layer count, one float32 ``direction.<layer>`` per layer, repeng's layer ids
    (the 0-based decoder block whose output it steers; llama.cpp's buffer row N − 1)."""
    import gguf

    arch = "controlvector"
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_string(f"{arch}.model_hint", model_hint)
    writer.add_uint32(f"{arch}.layer_count", len(directions))
    for layer in directions:
        writer.add_tensor(f"direction.{layer}", directions[layer])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def layer_vectors(seed: int = 0, layers=FILE_LAYERS, norm: float = 3.0) -> dict[int, np.ndarray]:
    """One vector per layer, each of its own norm (as repeng's per-layer directions)."""
    rng = np.random.default_rng(seed)
    out = {}
    for i, layer in enumerate(layers):
        v = rng.normal(size=HIDDEN)
        out[layer] = (v / np.linalg.norm(v) * norm * (1 + i)).astype(np.float32)
    return out


def deployed(held: dict[int, np.ndarray], anchor: int, k: float) -> SteeringVector:
    """The vector a run builds with ``steering.scale: file`` (kernel/vectors.deployed_vector):
    the unit direction at the run's layer, each layer's own vector, coefficient k."""
    unit = torch.from_numpy(held[anchor] / np.linalg.norm(held[anchor]))
    per_layer = {n: torch.from_numpy(v.copy()) for n, v in held.items()}
    return SteeringVector(unit.float(), anchor, per_layer=per_layer, coefficient=k)


def encode(lm, texts):
    return lm.tokenizer(texts, return_tensors="pt", padding=True)


@contextmanager
def residuals(lm):
    """Every layer's output as it leaves the layer (``raw``, before any steering hook: the
    hook is prepended) and as the next layer sees it (``seen``, after every hook)."""
    raw: dict[int, torch.Tensor] = {}
    seen: dict[int, torch.Tensor] = {}
    handles = []
    for n in range(lm.n_layers):

        def before(_m, _i, out, n=n):
            raw[n] = layer_output_tensor(out).detach().clone()

        def after(_m, _i, out, n=n):
            seen[n] = layer_output_tensor(out).detach().clone()

        handles.append(lm.layer(n).register_forward_hook(before, prepend=True))
        handles.append(lm.layer(n).register_forward_hook(after))
    try:
        yield raw, seen
    finally:
        for h in handles:
            h.remove()


@torch.inference_mode()
def logits(lm, texts):
    return lm.model(**encode(lm, texts)).logits


def steering_hooks(lm) -> dict[int, int]:
    """How many of our steering hooks each layer holds now."""
    return {
        n: sum(isinstance(h, RowSteering) for h in lm.layer(n)._forward_hooks.values())
        for n in range(lm.n_layers)
    }


# ---------------------------------------------------------------------------- the hooks


def test_every_layer_of_the_file_is_hooked_in_one_pass_and_every_hook_removed(tiny_lm):
    held = layer_vectors()
    vector = deployed(held, 2, 1.5)
    assert vector.layers == FILE_LAYERS
    before = {n: dict(tiny_lm.layer(n)._forward_hooks) for n in range(tiny_lm.n_layers)}
    with vector.apply(tiny_lm, 1.0) as hook:
        assert steering_hooks(tiny_lm) == {0: 0, 1: 1, 2: 1, 3: 1}
        assert any(h is hook for h in tiny_lm.layer(2)._forward_hooks.values())
    assert steering_hooks(tiny_lm) == {0: 0, 1: 0, 2: 0, 3: 0}
    assert {n: dict(tiny_lm.layer(n)._forward_hooks) for n in range(tiny_lm.n_layers)} == before
    # removed when the body raises, too
    with pytest.raises(RuntimeError, match="boom"), vector.apply(tiny_lm, 1.0):
        assert sum(steering_hooks(tiny_lm).values()) == 3
        raise RuntimeError("boom")
    assert sum(steering_hooks(tiny_lm).values()) == 0


def test_scale_file_adds_exactly_k_times_each_layers_own_vector(tiny_lm):
    held = layer_vectors(seed=1)
    k, strengths = 1.5, [1.0, -1.0, 0.0]
    enc = encode(tiny_lm, PROMPTS)
    with (
        torch.inference_mode(),
        deployed(held, 2, k).apply(tiny_lm, strengths),
        residuals(tiny_lm) as (raw, seen),
    ):
        steered = tiny_lm.model(**enc).logits
    for n in range(tiny_lm.n_layers):
        added = seen[n] - raw[n]  # what the hooks added to layer n's output
        for row, s in enumerate(strengths):
            want = torch.zeros(HIDDEN)
            if n in held and s:
                want = torch.tensor(s * k) * torch.from_numpy(held[n])
            expected = want.expand_as(added[row])
            torch.testing.assert_close(added[row], expected, atol=1e-5, rtol=1e-5)
    assert not torch.equal(seen[1][0], raw[1][0])  # it did steer
    # the same model steered by plain hooks written here: h_l + s·k·v_l at each layer
    handles = []
    for n, v in held.items():
        add = torch.tensor(strengths)[:, None, None] * k * torch.from_numpy(v)

        def hook(_m, _i, out, add=add):
            return out + add if isinstance(out, torch.Tensor) else (out[0] + add, *out[1:])

        handles.append(tiny_lm.layer(n).register_forward_hook(hook))
    try:
        manual = logits(tiny_lm, PROMPTS)
    finally:
        for h in handles:
            h.remove()
    torch.testing.assert_close(steered, manual, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(steered[2], logits(tiny_lm, PROMPTS)[2])  # s = 0: unsteered


def test_steer_layers_with_one_layer_is_the_one_layer_hook_bit_for_bit(tiny_lm):
    d = torch.from_numpy(layer_vectors(seed=2)[1] / 3.0)
    coefs = torch.tensor([4.0, -4.0, 0.0])
    with steer_layers(tiny_lm, 2, d, coefs, "additive") as hooks:
        assert set(hooks) == {2}
        many = logits(tiny_lm, PROMPTS)
    with SteeringVector(d / d.norm(), 2, alpha=4.0 * float(d.norm()), beta=1.0).apply(
        tiny_lm, [1.0, -1.0, 0.0]
    ):
        one = logits(tiny_lm, PROMPTS)
    torch.testing.assert_close(many, one)
    wrong = pytest.raises(ValueError, match=r"needs directions \[.., 2, hidden\]")
    with wrong, steer_layers(tiny_lm, (1, 2), d, coefs, "additive"):
        pass
    assert sum(steering_hooks(tiny_lm).values()) == 0


# ---------------------------------------------------------------------------- the file


@pytest.fixture
def repeng_file(tmp_path):
    held = layer_vectors(seed=3, layers=(1, 2, 3))
    return repeng_gguf(tmp_path / "happy.gguf", held), held


def read_as(path, layers, layer: int = 2, **kwargs):
    return read_layered_vectors(path, ["dog.n.01"], ["dog"], HIDDEN, layer, layers, **kwargs)


def test_layers_file_takes_every_layer_as_the_file_holds_it(repeng_file):
    path, held = repeng_file
    notes: list[str] = []
    got = read_as(path, "file", notes=notes, n_layers=4)
    assert sorted(got.layers["dog.n.01"]) == [1, 2, 3]
    for n, v in held.items():
        assert np.array_equal(got.layers["dog.n.01"][n], v)  # its own norm, not normalised
    assert np.array_equal(got.anchor["dog.n.01"], held[2])
    (line,) = notes
    assert "steering 3 of the 3 layers it holds, [1, 2, 3] (steering.layers: file)" in line


@pytest.mark.parametrize(
    ("span", "taken"), [((1, 2), [1, 2]), ((2, 2), [2]), ((2, 9), [2, 3]), ((0, 3), [1, 2, 3])]
)
def test_a_range_takes_the_files_layers_between_both_ends_included(repeng_file, span, taken):
    path, held = repeng_file
    got = read_as(path, span)
    assert sorted(got.layers["dog.n.01"]) == taken  # llama.cpp's --control-vector-layer-range
    assert all(np.array_equal(got.layers["dog.n.01"][n], held[n]) for n in taken)


def test_auto_takes_the_runs_layer_alone(repeng_file):
    path, held = repeng_file
    got = read_as(path, "auto")
    assert list(got.layers["dog.n.01"]) == [2] and np.array_equal(
        got.layers["dog.n.01"][2], held[2]
    )


def test_a_range_without_the_runs_layer_or_beyond_the_model_is_refused(repeng_file):
    path, _ = repeng_file
    with pytest.raises(
        VectorFileError, match=r"layer 2 is not among .*steers \(\[3\]; the file holds \[1, 2, 3\]"
    ):
        read_as(path, (3, 5))
    with pytest.raises(VectorFileError, match=r"direction.3 is beyond the model's 3 decoder"):
        read_as(path, "file", n_layers=3)


def test_a_mapping_file_has_no_layers_to_steer(tmp_path):
    v = layer_vectors(seed=4)[1]
    write_mapping(tmp_path / "v.safetensors", {"dog.n.01": v}, {})
    with pytest.raises(VectorFileError, match="holds one vector per concept, for no layer"):
        read_as(tmp_path / "v.safetensors", "file")
    got = read_as(tmp_path / "v.safetensors", "auto")  # scale: file at the run's layer
    assert np.array_equal(got.layers["dog.n.01"][2], v)


# ---------------------------------------------------------------------------- model hints

QWEN2 = ModelKind("qwen2", ("qwen2", "Qwen2ForCausalLM"))
LLAMA = ModelKind("llama", ("llama", "LlamaForCausalLM"))
GEMMA = ModelKind("gemma3_text", ("gemma3_text", "Gemma3ForCausalLM"))


@pytest.mark.parametrize(
    ("kind", "hint", "warned"),
    [
        (QWEN2, "qwen2.5", False),  # EasySteer's hint for Qwen2.5 models (model_type qwen2)
        (QWEN2, "Qwen2.5", False),
        (LLAMA, "llama3", False),  # Llama 3 is model_type llama
        (LLAMA, "llama3.1", False),
        (GEMMA, "gemma3", False),  # the multimodal Gemma 3's type; its text model's is _text
        (QWEN2, "qwen3", True),  # a different family
        (QWEN2, "qwen2_moe", True),
        (LLAMA, "mistral", True),
        (GEMMA, "gemma2", True),
        (GEMMA, "llama3", True),
    ],
)
def test_a_hint_is_read_by_model_family(tmp_path, kind, hint, warned):
    path = repeng_gguf(tmp_path / "v.gguf", layer_vectors(seed=5, layers=(2,)), hint)
    notes: list[str] = []
    read_vectors(path, ["dog.n.01"], ["dog"], HIDDEN, 2, kind, notes)
    assert bool(notes) is warned
    if warned:
        assert f"controlvector.model_hint is {hint!r}, but the model is" in notes[0]
        assert "a vector made on another model may not steer this one" in notes[0]


# ---------------------------------------------------------------------------- recipes


def recipe(name: str) -> str:
    """A Python recipe of docs/vectors.md, as the page shows it."""
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "vectors.md").read_text()
    after = page.split(f"<!-- recipe: {name}", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_axbench_recipe_writes_a_concept_list_whose_vectors_load_by_id(tmp_path, monkeypatch):
    """The documented AxBench-style list loads as a concept graph (free-text definitions,
    ids that name the vector files), and a folder of repeng GGUFs named by those ids is
    read at every layer for its concepts."""
    from experiments.concepts import load_concepts

    monkeypatch.chdir(tmp_path)
    exec(compile(recipe("axbench_concepts"), "docs/vectors.md", "exec"), {})
    graph = load_concepts(str(tmp_path / "axbench_concepts.json"))
    assert [c.synset for c in graph.concepts] == ["golden_gate", "bicycles"]
    golden = graph.concepts[0]
    assert golden.name == "the Golden Gate Bridge"
    assert golden.gloss == "references to the Golden Gate Bridge"  # AxBench's text as it is
    folder = tmp_path / "vectors"
    folder.mkdir()
    held = {}
    for i, c in enumerate(graph.concepts):
        held[c.synset] = layer_vectors(seed=10 + i)
        repeng_gguf(folder / f"{c.synset}.gguf", held[c.synset])
    got = read_layered_vectors(
        folder,
        [c.synset for c in graph.concepts],
        [c.name for c in graph.concepts],
        HIDDEN,
        2,
        "file",
    )
    for synset, layers in held.items():
        assert sorted(got.layers[synset]) == list(FILE_LAYERS)
        assert all(np.array_equal(got.layers[synset][n], v) for n, v in layers.items())


# ---------------------------------------------------------------------------- decoding


def test_every_decode_policy_steers_the_same_layers_and_scores_from_the_lowest(tiny_lm):
    """A batch steered at several layers decodes the same tokens under every policy (the
    CUDA policy's static buffers hold one hook per layer; its graph-free step runs here),
    differs from the same rows at one layer, and its unsteered NLL from the residual
    stream captured below the lowest steered layer is the full pass's."""
    from steering.decode import CpuPolicy, ReferencePolicy
    from steering.decode_cuda import CudaPolicy
    from steering.generation import GenerationRow, SamplingConfig, continuation_nll, generate_batch

    sampling = SamplingConfig(max_new_tokens=8, temperature=1.0, top_p=0.95)
    held = [layer_vectors(seed=20 + d) for d in range(2)]  # two directions, 3 layers each
    stacked = torch.stack(
        [torch.stack([torch.from_numpy(h[n]) for n in FILE_LAYERS]) for h in held]
    )
    rows = [
        GenerationRow(f"r{i}", PROMPTS[i % 3], seed=70 + i, direction=i % 2, coefficient=c)
        for i, c in enumerate([0.0, 1.0, -1.0, 1.0, 0.0, -1.0])
    ]
    got = {}
    for policy in (ReferencePolicy(), CpuPolicy(), CudaPolicy(graphs=False)):
        gens, _ = generate_batch(tiny_lm, rows, stacked, FILE_LAYERS, "additive", sampling,
                                 policy=policy)  # fmt: skip
        got[policy.name] = [g.token_ids for g in gens]
    assert got["reference"] == got["cpu"] == got["cuda"]
    one, _ = generate_batch(tiny_lm, rows, stacked[:, 1], 2, "additive", sampling)
    steered = [i for i, r in enumerate(rows) if r.coefficient]
    assert sum(got["cpu"][i] != one[i].token_ids for i in steered) >= 2
    assert all(got["cpu"][i] == one[i].token_ids for i, r in enumerate(rows) if not r.coefficient)
    states: list = []
    gens, _ = generate_batch(tiny_lm, rows, stacked, FILE_LAYERS, "additive", sampling,
                             layer_states=states)  # fmt: skip
    prompts = [g.prompt for g in gens]
    conts = [g.token_ids for g in gens]
    full = continuation_nll(tiny_lm, prompts, conts)
    suffix = continuation_nll(tiny_lm, prompts, conts, states=states, from_layer=FILE_LAYERS[0] + 1)
    assert suffix == pytest.approx(full, abs=1e-4)
