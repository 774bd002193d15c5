"""steering.models: the uniform layer handle, layer indices, loader errors, slugs."""

from __future__ import annotations

import copy
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from steering.assets import AssetError
from steering.models import (
    LayerIndexError,
    LoadedModel,
    ModelSpecError,
    find_decoder_layers,
    load_model,
    model_slug,
    pick_device,
    pick_dtype,
    wrap_model,
)

PROPS = settings(derandomize=True, deadline=None, max_examples=100)


# ---------------------------------------------------------------------------- decoder layers


def test_find_decoder_layers_on_gemma3_is_the_text_layer_list(tiny_lm):
    layers = find_decoder_layers(tiny_lm.model)
    assert layers is tiny_lm.model.model.layers
    assert len(layers) == 4
    assert tiny_lm.layers is layers


class _Config:
    def __init__(self, n: int) -> None:
        self.num_hidden_layers = n


def test_find_decoder_layers_under_a_multimodal_nesting(tiny_lm):
    """Gemma 3 4B nests its text layers under ``model.language_model``."""
    outer = nn.Module()
    outer.model = nn.Module()
    outer.model.language_model = tiny_lm.model.model  # a Gemma3TextModel with .layers
    assert find_decoder_layers(outer) is tiny_lm.model.model.layers


def test_find_decoder_layers_falls_back_to_a_module_list_of_the_configured_length():
    odd = nn.Module()
    odd.config = _Config(3)
    odd.embed = nn.ModuleList([nn.Linear(2, 2)])  # wrong length: not the decoder
    odd.blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert find_decoder_layers(odd) is odd.blocks


def test_find_decoder_layers_fails_loudly_when_there_are_none():
    bare = nn.Module()
    bare.config = _Config(5)
    bare.blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(2)])
    with pytest.raises(ModelSpecError, match="could not find the decoder layers"):
        find_decoder_layers(bare)


# ---------------------------------------------------------------------------- layer indices


def test_shape_properties(tiny_lm):
    assert tiny_lm.n_layers == 4
    assert tiny_lm.hidden_size == 64
    assert tiny_lm.default_layer == 2  # the middle layer, n // 2
    assert tiny_lm.device == torch.device("cpu")
    assert tiny_lm.dtype == torch.float32


@pytest.mark.parametrize(("index", "expected"), [(0, 0), (3, 3), (-1, 3), (-4, 0), (-2, 2)])
def test_check_layer_accepts_negative_indices_from_the_end(tiny_lm, index, expected):
    assert tiny_lm.check_layer(index) == expected
    assert tiny_lm.layer(index) is tiny_lm.layers[expected]


@pytest.mark.parametrize("index", [4, 5, 100, -5, -100])
def test_check_layer_rejects_out_of_range_and_names_the_valid_range(tiny_lm, index):
    with pytest.raises(LayerIndexError) as info:
        tiny_lm.check_layer(index)
    message = str(info.value)
    assert f"layer {index}" in message
    assert "0..3" in message
    assert "4 decoder layers" in message
    assert "tiny-random-gemma3" in message
    with pytest.raises(LayerIndexError):
        tiny_lm.layer(index)


def test_layer_index_error_is_a_value_error():
    assert issubclass(LayerIndexError, ValueError)


def test_default_layer_is_the_middle_for_other_depths(tiny_lm):
    for n, middle in [(1, 0), (2, 1), (5, 2), (18, 9)]:
        handle = LoadedModel(
            model=tiny_lm.model,
            tokenizer=tiny_lm.tokenizer,
            layers=nn.ModuleList([nn.Identity() for _ in range(n)]),
            model_id=f"fake-{n}",
            device=torch.device("cpu"),
            dtype=torch.float32,
        )
        assert handle.n_layers == n
        assert handle.default_layer == middle
        assert handle.check_layer(handle.default_layer) == middle


# ---------------------------------------------------------------------------- wrap_model


def test_wrap_model_sets_left_padding_and_a_pad_token(tiny_lm):
    tokenizer = copy.deepcopy(tiny_lm.tokenizer)
    tokenizer.padding_side = "right"
    tokenizer.pad_token = None
    assert tokenizer.pad_token_id is None
    handle = wrap_model(tiny_lm.model, tokenizer, "copy")
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token_id == tokenizer.eos_token_id
    assert handle.layers is tiny_lm.layers
    assert handle.info == {}


# ---------------------------------------------------------------------------- device and dtype


def test_pick_dtype_defaults_to_fp32_on_cpu_and_rejects_unknown_names(monkeypatch):
    cpu = torch.device("cpu")
    assert pick_dtype(cpu) is torch.float32
    assert pick_dtype(cpu, "auto") is torch.float32
    # a card that has bf16 (as torch reports it) gets bf16, one without fp16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert pick_dtype(torch.device("cuda"), "auto") is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    assert pick_dtype(torch.device("cuda"), "auto") is torch.float16
    assert pick_dtype(cpu, "bf16") is torch.bfloat16
    assert pick_dtype(cpu, "float16") is torch.float16
    with pytest.raises(ModelSpecError, match="unknown dtype 'int8'"):
        pick_dtype(cpu, "int8")


def test_pick_device_explicit():
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device("auto").type in ("cpu", "cuda")


# ---------------------------------------------------------------------------- load_model errors


def test_load_model_unknown_hub_id_offline_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSpecError) as info:
        load_model("steer-eval-tests/no-such-model-xyz", device="cpu")
    message = str(info.value)
    assert "no-such-model-xyz" in message
    assert "offline" in message
    assert "HF_HUB_OFFLINE=1" in message


def test_load_model_embedded_without_setup_points_to_make_setup(monkeypatch, tmp_path):
    empty = tmp_path / "cache"
    empty.mkdir()
    monkeypatch.setenv("STEER_EVAL_CACHE", str(empty))
    with pytest.raises(AssetError) as info:
        load_model("embedded", device="cpu")
    assert "make setup" in str(info.value)
    assert str(empty) in str(info.value)


def test_load_model_missing_gguf_file(tmp_path):
    with pytest.raises(ModelSpecError, match="does not exist"):
        load_model(str(tmp_path / "missing.gguf"), device="cpu")


def test_load_model_rejects_a_plain_file(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\0")
    with pytest.raises(ModelSpecError, match="is a file"):
        load_model(str(path), device="cpu")


def test_load_model_empty_directory_is_a_model_spec_error(tmp_path):
    with pytest.raises(ModelSpecError, match="could not load model"):
        load_model(str(tmp_path), device="cpu")


# ---------------------------------------------------------------------------- model_slug


@pytest.mark.parametrize(
    ("model_id", "slug"),
    [
        ("google/gemma-3-4b-pt", "google_gemma-3-4b-pt"),
        ("embedded:gemma-3-270m", "embedded_gemma-3-270m"),
        ("gguf:gemma-3-270m-q4_k_m.gguf", "gguf_gemma-3-270m-q4_k_m.gguf"),
        ("tiny-random-gemma3", "tiny-random-gemma3"),
        ("/abs/path/to model/", "abs_path_to_model"),
    ],
)
def test_model_slug_examples(model_id, slug):
    assert model_slug(model_id) == slug


@PROPS
@given(st.text(max_size=200))
def test_model_slug_is_filesystem_safe_short_and_idempotent(model_id):
    slug = model_slug(model_id)
    assert re.fullmatch(r"[A-Za-z0-9._-]*", slug)
    assert len(slug) <= 80
    assert not slug.startswith("_")
    assert "/" not in slug
    assert model_slug(slug) == slug or len(slug) == 80


# ---------------------------------------------------------------------------- embedded model


@pytest.mark.integration
def test_embedded_model_shape(embedded_lm):
    assert embedded_lm.model_id == "embedded:gemma-3-270m"
    assert embedded_lm.n_layers == 18
    assert embedded_lm.hidden_size == 640
    assert embedded_lm.default_layer == 9
    assert embedded_lm.dtype == torch.float32
    assert embedded_lm.tokenizer.padding_side == "left"
    assert embedded_lm.layers is find_decoder_layers(embedded_lm.model)
    with pytest.raises(LayerIndexError, match=r"0\.\.17"):
        embedded_lm.check_layer(18)


@pytest.mark.parametrize(
    "spec", ["/no/such/dir", "./models/gemma", "models/google/gemma-3-4b-pt", "~/no-such", "x/"]
)
def test_a_missing_model_directory_is_named_as_such(spec):
    with pytest.raises(ModelSpecError, match=r"model directory .* does not exist \("):
        load_model(spec, device="cpu")


def test_an_id_like_spec_that_is_not_found_says_no_directory_exists_either(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSpecError, match="No local directory 'models/gemma-x' exists either"):
        load_model("models/gemma-x", device="cpu")
