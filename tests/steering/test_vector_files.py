"""Vector files: every format read and validated, GGUF control vectors written as
llama.cpp and repeng lay them out (read back with the gguf package itself)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from steering.vector_files import (
    UNIT_KEY,
    ModelKind,
    VectorFileError,
    check_for_llama_cpp,
    read_control_vector,
    read_vectors,
    write_control_vector,
    write_mapping,
)

SYNSETS = ["dog.n.01", "herb.n.01"]
NAMES = ["dog", "herb"]
HIDDEN = 8


def vectors(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {s: rng.normal(size=HIDDEN).astype(np.float32) for s in SYNSETS}


def read(path, layer: int = 3, hidden: int = HIDDEN):
    return read_vectors(path, SYNSETS, NAMES, hidden, layer)


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_a_control_vector_has_repengs_and_llama_cpps_layout(tmp_path):
    from gguf import GGUFReader

    v = vectors()["dog.n.01"]
    path = write_control_vector(
        tmp_path / "dog.gguf", {3: v}, "gemma3_text", {"steer_eval.concept": "dog.n.01"}
    )
    reader = GGUFReader(path)
    assert reader.get_field("general.architecture").contents() == "controlvector"
    assert reader.get_field("controlvector.model_hint").contents() == "gemma3_text"
    assert reader.get_field("controlvector.layer_count").contents() == 1
    (tensor,) = reader.tensors
    assert tensor.name == "direction.3"
    assert tensor.data.dtype == np.float32 and tensor.data.shape == (HIDDEN,)
    assert np.array_equal(tensor.data, v)
    back = read_control_vector(path)
    assert back.model_hint == "gemma3_text" and np.array_equal(back.directions[3], v)
    assert back.metadata["steer_eval.concept"] == "dog.n.01"


def test_layer_zero_cannot_be_written_because_llama_cpp_rejects_it(tmp_path):
    with pytest.raises(VectorFileError, match=r"direction\.0"):
        write_control_vector(tmp_path / "x.gguf", {0: vectors()["dog.n.01"]}, "m")


def test_every_mapping_format_reads_the_same_vectors(tmp_path):
    vs = vectors()
    write_mapping(tmp_path / "m.safetensors", vs, {"model": "x"})
    torch.save({k: torch.from_numpy(v) for k, v in vs.items()}, tmp_path / "m.pt")
    np.savez(tmp_path / "m.npz", **vs)
    for name in ("m.safetensors", "m.pt", "m.npz"):
        assert same(read(tmp_path / name), vs), name


def test_a_folder_of_files_named_by_concept_or_by_name(tmp_path):
    vs = vectors()
    np.save(tmp_path / "dog.n.01.npy", vs["dog.n.01"])
    write_control_vector(tmp_path / "herb.gguf", {3: vs["herb.n.01"], 5: vs["dog.n.01"]}, "m")
    assert same(read(tmp_path), vs)  # "herb" is the concept's name, layer 3 picked


def test_a_gguf_without_the_runs_layer_names_the_layers_it_has(tmp_path):
    vs = vectors()
    write_control_vector(tmp_path / "one.gguf", {5: vs["dog.n.01"]}, "m")
    with pytest.raises(VectorFileError, match=r"no direction.3 .* layers \[5\]"):
        read_vectors(tmp_path / "one.gguf", ["dog.n.01"], ["dog"], HIDDEN, 3)


def test_our_export_carries_its_exact_unit_direction(tmp_path):
    unit = np.float32([0.6, 0.8, 0, 0, 0, 0, 0, 0])
    write_control_vector(
        tmp_path / "dog.n.01.gguf",
        {3: unit * np.float32(1234.5)},
        "m",
        {"steer_eval.layer": 3, UNIT_KEY: unit},
    )
    got = read_vectors(tmp_path, ["dog.n.01"], ["dog"], HIDDEN, 3)["dog.n.01"]
    assert got.dtype == np.float32 and np.array_equal(got, unit)


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (lambda vs: vs.pop("herb.n.01"), r"no vector for herb.n.01"),
        (lambda vs: vs.update({"dog.n.01": np.zeros(HIDDEN, np.float32)}), "all zeros"),
        (lambda vs: vs["dog.n.01"].__setitem__(2, np.nan), "NaN or infinite"),
        (lambda vs: vs.update({"dog.n.01": np.ones(HIDDEN + 1, np.float32)}), "hidden size"),
        (lambda vs: vs.update({"dog": vs["dog.n.01"]}), "both dog.n.01"),
    ],
)
def test_bad_vectors_name_the_file_the_concept_and_the_fix(tmp_path, break_it, message):
    vs = vectors()
    break_it(vs)
    path = write_mapping(tmp_path / "bad.safetensors", vs, {})
    with pytest.raises(VectorFileError, match=message) as info:
        read(path)
    assert "bad.safetensors" in str(info.value)


def test_a_misspelt_concept_is_pointed_at(tmp_path):
    vs = vectors()
    vs["herb.n.1"] = vs.pop("herb.n.01")
    path = write_mapping(tmp_path / "typo.safetensors", vs, {})
    with pytest.raises(VectorFileError, match=r"herb.n.01 \(closest in the file: 'herb.n.1'\)"):
        read(path)


def test_vectors_of_concepts_outside_the_run_are_ignored(tmp_path):
    vs = {**vectors(), "cat.n.01": np.ones(HIDDEN, np.float32)}
    assert same(read(write_mapping(tmp_path / "more.safetensors", vs, {})), vectors())


def test_a_pickle_is_never_executed(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"dog.n.01": object()}, path)  # needs pickle's arbitrary objects to load
    with pytest.raises(VectorFileError, match="safely"):
        read(path)
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(VectorFileError, match=r"plain \.npy"):
        read_vectors(tmp_path / "obj.npy", ["obj"], ["obj"], HIDDEN, 3)


def test_a_model_file_is_not_taken_for_a_control_vector(tmp_path):
    from gguf import GGUFWriter

    writer = GGUFWriter(str(tmp_path / "model.gguf"), "llama")
    writer.add_tensor("direction.3", np.ones(HIDDEN, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(VectorFileError, match="not a control vector"):
        read_control_vector(tmp_path / "model.gguf")


def test_unknown_files_and_missing_paths_say_what_works(tmp_path):
    (tmp_path / "v.txt").write_text("1 2 3")
    with pytest.raises(VectorFileError, match="unknown vector file type"):
        read(tmp_path / "v.txt")
    with pytest.raises(VectorFileError, match="no such file"):
        read(tmp_path / "absent.safetensors")


def test_a_folder_reads_only_files_named_by_the_runs_concepts(tmp_path):
    vs = vectors()
    for synset, v in vs.items():
        np.save(tmp_path / f"{synset}.npy", v)
    write_mapping(tmp_path / "directions.safetensors", vs, {})  # as an export has beside
    (tmp_path / "cat.n.01.npy").write_bytes(b"not read")  # another concept's file
    assert same(read(tmp_path), vs)


GEMMA = ModelKind("gemma3_text", ("gemma3_text", "Gemma3ForCausalLM"))


def repeng_file(path, layers=range(1, 18), hint="gemma3_text", seed=1):
    """A repeng-style control vector: one direction per layer, no steer_eval metadata."""
    rng = np.random.default_rng(seed)
    directions = {la: rng.normal(size=HIDDEN).astype(np.float32) for la in layers}
    write_control_vector(path, directions, hint)
    return directions


def test_a_many_layer_file_gives_the_runs_layer_and_says_how_many_it_ignored(tmp_path, caplog):
    directions = repeng_file(tmp_path / "happy.gguf")
    notes: list[str] = []
    with caplog.at_level("WARNING", logger="steering.vector_files"):
        got = read_vectors(tmp_path / "happy.gguf", ["dog.n.01"], ["dog"], HIDDEN, 9, GEMMA, notes)
    assert np.array_equal(got["dog.n.01"], directions[9])
    (line,) = notes
    assert "happy.gguf: took direction.9 (this run's layer) of the 17 layers" in line
    assert "the other 16 were ignored" in line
    assert [r.getMessage() for r in caplog.records] == [line]


def test_a_folder_of_many_layer_files_says_it_once(tmp_path):
    for synset in SYNSETS:
        repeng_file(tmp_path / f"{synset}.gguf", layers=(2, 3, 4))
    notes: list[str] = []
    read_vectors(tmp_path, SYNSETS, NAMES, HIDDEN, 3, GEMMA, notes)
    (line,) = notes
    assert line.startswith(f"2 GGUF files in {tmp_path} (dog.n.01.gguf, herb.n.01.gguf)")
    assert "of the 3 layers each holds; the other 2 were ignored" in line


def test_one_layer_of_the_runs_layer_says_nothing(tmp_path):
    repeng_file(tmp_path / "one.gguf", layers=(3,))
    notes: list[str] = []
    read_vectors(tmp_path / "one.gguf", ["dog.n.01"], ["dog"], HIDDEN, 3, GEMMA, notes)
    assert notes == []


def test_a_many_layer_file_without_the_runs_layer_is_refused(tmp_path):
    repeng_file(tmp_path / "happy.gguf", layers=range(10, 18))
    with pytest.raises(VectorFileError, match=r"no direction.9 .* layers \[10, 11, .*17\]"):
        read_vectors(tmp_path / "happy.gguf", ["dog.n.01"], ["dog"], HIDDEN, 9, GEMMA)


@pytest.mark.parametrize(
    ("hint", "warned"),
    [
        ("gemma3_text", False),  # what repeng and our exports write: the model type
        ("Gemma3ForCausalLM", False),  # our exports before: the architecture class
        ("", False),  # no hint, nothing to compare
        ("unknown", False),  # EasySteer's export without a model_type: names no model
        ("llama", True),
        ("LlamaForCausalLM", True),
    ],
)
def test_a_hint_of_another_model_is_warned_about_not_refused(tmp_path, hint, warned):
    directions = repeng_file(tmp_path / "v.gguf", layers=(3,), hint=hint)
    notes: list[str] = []
    got = read_vectors(tmp_path / "v.gguf", ["dog.n.01"], ["dog"], HIDDEN, 3, GEMMA, notes)
    assert np.array_equal(got["dog.n.01"], directions[3])  # used either way
    if warned:
        (line,) = notes
        assert f"controlvector.model_hint is {hint!r}, but the model is 'gemma3_text'" in line
    else:
        assert notes == []


def test_without_the_models_kind_no_hint_is_judged(tmp_path):
    repeng_file(tmp_path / "v.gguf", layers=(3,), hint="llama")
    notes: list[str] = []
    read_vectors(tmp_path / "v.gguf", ["dog.n.01"], ["dog"], HIDDEN, 3, notes=notes)
    assert notes == []


def test_the_kind_of_a_loaded_gemma_is_its_model_type_and_class(tiny_lm):
    kind = ModelKind.of(tiny_lm.model.config, type(tiny_lm.model).__name__)
    assert kind.model_type == "gemma3_text"
    assert kind.matches("gemma3_text") and kind.matches("Gemma3ForCausalLM")
    # by family: Gemma 3's multimodal class and type are Gemma 3; Gemma 2 and Llama are not
    assert kind.matches("Gemma3ForConditionalGeneration") and kind.matches("gemma3")
    assert not kind.matches("llama") and not kind.matches("Gemma2ForCausalLM")


def raw_control_vector(path, tensors: dict[str, np.ndarray]):
    """A control vector with exactly ``tensors`` (what write_control_vector would refuse)."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "controlvector")
    writer.add_uint32("controlvector.layer_count", len(tensors))
    for name, value in tensors.items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_what_llama_cpp_accepts_is_read_back_whole(tmp_path):
    vs = vectors()
    path = write_control_vector(tmp_path / "ok.gguf", {1: vs["dog.n.01"], 17: vs["herb.n.01"]}, "m")
    cv = check_for_llama_cpp(path, n_layer=18, n_embd=HIDDEN)
    assert sorted(cv.directions) == [1, 17]
    assert np.array_equal(cv.directions[17], vs["herb.n.01"])


@pytest.mark.parametrize(
    ("tensors", "n_layer", "n_embd", "message"),
    [
        ({"direction.0": np.ones(HIDDEN, np.float32)}, 18, HIDDEN, r"direction\.0.*N ≥ 1"),
        (
            {"direction.3": np.ones(HIDDEN, np.float32), "scale": np.ones(1, np.float32)},
            18,
            HIDDEN,
            r"\['scale'\] are not direction\.<N>; llama\.cpp refuses",
        ),
        ({"direction.18": np.ones(HIDDEN, np.float32)}, 18, HIDDEN, r"beyond the model's 18"),
        ({"direction.3": np.ones(HIDDEN, np.float32)}, 18, 640, r"8 wide.*n_embd is 640"),
    ],
    ids=["direction.0", "another tensor", "beyond the last block", "another width"],
)
def test_what_llama_cpp_refuses_is_refused_with_the_reason(
    tmp_path, tensors, n_layer, n_embd, message
):
    path = raw_control_vector(tmp_path / "bad.gguf", tensors)
    with pytest.raises(VectorFileError, match=message) as caught:
        check_for_llama_cpp(path, n_layer, n_embd)
    assert str(path) in str(caught.value)
