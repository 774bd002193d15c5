"""steering.dummy and load_model(load_format="dummy"): random weights from a config file.

The shipped Gemma 3 4B config must be the published one (``google/gemma-3-4b-pt``'s
config.json: text and vision), build as the class the real model loads as, and count
its 4.3 B parameters, all on the ``meta`` device (no memory). A tiny config of the same
class loads with seeded weights and generates.
"""

from __future__ import annotations

import pytest
import torch

from experiments.config import load_config
from steering.dummy import MODEL_CONFIGS, resolve_config, shipped_configs
from steering.generation import GenerationRow, SamplingConfig, generate_batch
from steering.models import ModelSpec, ModelSpecError, load_model

GEMMA_4B_PARAMETERS = 4_300_079_472  # embeddings tied to the head, vision tower included


@pytest.fixture(scope="module")
def gemma_4b_meta():
    return load_model("google/gemma-3-4b-pt", device="meta", dtype="bfloat16", load_format="dummy")


def test_the_4b_config_has_the_published_shapes(gemma_4b_meta):
    lm = gemma_4b_meta
    config = lm.model.config
    text, vision = config.text_config, config.vision_config
    assert type(lm.model).__name__ == "Gemma3ForConditionalGeneration"
    assert (text.hidden_size, text.num_hidden_layers, text.intermediate_size) == (2560, 34, 10240)
    assert (text.num_attention_heads, text.num_key_value_heads, text.head_dim) == (8, 4, 256)
    assert text.sliding_window == 1024 and text.vocab_size == 262_208
    assert text.layer_types.count("full_attention") == 5  # every sixth layer is global
    assert text.rope_parameters["full_attention"] == {
        "rope_type": "linear",
        "factor": 8.0,
        "rope_theta": 1_000_000.0,
    }
    assert text.rope_parameters["sliding_attention"]["rope_theta"] == 10_000.0
    assert text.query_pre_attn_scalar == 256 and text.rms_norm_eps == 1e-6
    assert (vision.hidden_size, vision.num_hidden_layers, vision.intermediate_size) == (
        1152,
        27,
        4304,
    )
    assert (vision.image_size, vision.patch_size, vision.num_attention_heads) == (896, 14, 16)
    assert config.mm_tokens_per_image == 256 and config.image_token_id == 262_144
    assert (lm.n_layers, lm.hidden_size, lm.default_layer) == (34, 2560, 17)


def test_the_4b_builds_on_meta_with_its_parameter_count(gemma_4b_meta):
    lm = gemma_4b_meta
    assert lm.device.type == "meta" and lm.dtype == torch.bfloat16
    count = sum(p.numel() for p in lm.model.parameters())
    assert count == GEMMA_4B_PARAMETERS
    head = lm.model.get_output_embeddings().weight
    assert head is lm.model.get_input_embeddings().weight  # tied, as published
    assert lm.model_id == "dummy:gemma-3-4b-pt"
    assert lm.info["load_format"] == "dummy"
    assert len(lm.tokenizer) <= head.shape[0]  # the embedded tokenizer fits the 4B's vocabulary


def test_the_4b_config_file_loads_the_4b_with_its_defaults(gemma_4b_meta):
    config = load_config("configs/gemma-3-4b.yaml")
    assert config.model == "google/gemma-3-4b-pt"
    assert config.layer == gemma_4b_meta.default_layer  # the middle of its 34 layers
    assert (config.dtype, config.device, config.generation.batch_size) == ("auto", "auto", "auto")
    assert config.likelihood.enabled and config.selection.mode == "heldout"
    assert config.concepts.file.endswith("wordnet_top50.json") and config.concepts.limit == 50
    study = load_config("configs/study.yaml")  # the study's design, the 4B's defaults
    for section in ("selection", "controls", "likelihood", "gate"):
        assert getattr(config, section) == getattr(study, section), section
    g, gs = config.generation, study.generation
    assert (g.prompts, g.suppression_prompts) == (gs.prompts, gs.suppression_prompts)
    assert g.samples_per_prompt == gs.samples_per_prompt


def test_config_names_resolve_to_the_shipped_file(tmp_path):
    assert "gemma-3-4b-pt" in shipped_configs()
    shipped = MODEL_CONFIGS / "gemma-3-4b-pt.json"
    assert resolve_config("gemma-3-4b-pt") == (shipped, "gemma-3-4b-pt")
    assert resolve_config("google/gemma-3-4b-pt") == (shipped, "gemma-3-4b-pt")
    with pytest.raises(ModelSpecError, match="gemma-3-4b-pt"):
        load_model("no/such-model", device="meta", load_format="dummy")
    with pytest.raises(ModelSpecError, match="unknown load format 'safetensors'"):
        load_model("embedded", device="meta", load_format="safetensors")


def test_a_tiny_dummy_of_the_4b_class_loads_and_generates(tiny_multimodal_json, one_thread):
    path = tiny_multimodal_json
    lm = load_model(str(path), device="cpu", dtype="float32", load_format="dummy")
    again = load_model(str(path), device="cpu", dtype="float32", load_format="dummy")
    assert type(lm.model).__name__ == "Gemma3ForConditionalGeneration"
    assert lm.model_id == "dummy:tiny-gemma3-mm"
    for a, b in zip(lm.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(a, b)  # seeded: the same weights every load
    rows = [GenerationRow(f"r{i}", p, seed=i) for i, p in enumerate(["Tell me about", "A"])]
    sampling = SamplingConfig(max_new_tokens=5)
    first, _ = generate_batch(lm, rows, None, 1, "additive", sampling)
    second, _ = generate_batch(again, rows, None, 1, "additive", sampling)
    assert [g.token_ids for g in first] == [g.token_ids for g in second]
    assert all(len(g.token_ids) == 5 and max(g.token_ids) < 262_208 for g in first)


def test_the_config_field_defaults_to_real_weights_and_keeps_old_hashes():
    config = load_config("configs/phase5.yaml")
    assert config.model_load_format == "auto"
    # the hash of configs/phase5.yaml before the field (tests/experiments/test_config_hash.py)
    assert config.config_hash() == "34dcba3ad5cd"  # the field's default leaves it as it was
    dummy = load_config("configs/phase5.yaml", ["model_load_format=dummy"])
    assert dummy.config_hash() != config.config_hash()
    with pytest.raises(ValueError, match="model_load_format"):
        load_config("configs/phase5.yaml", ["model_load_format=random"])
    assert ModelSpec("gemma-3-4b-pt", "cuda", "auto", "dummy").load_format == "dummy"
