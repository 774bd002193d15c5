"""Where a model spec is found (issue 37, item 1): the guide's path works literally.

The guide downloads with ``hf download <id> --local-dir models/<name>`` and configs name
the hub id; the id must then resolve to that folder, or to the Hugging Face cache, and a
model in neither must fail with the exact download line. Real loads of the tiny Gemma 3
saved as a folder and as a cache snapshot; no hub is reached.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from steering.models import (
    ModelSpecError,
    download_command,
    load_model,
    resolve_model,
)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def _logits(lm) -> torch.Tensor:
    ids = torch.tensor([[1, 5, 9, 17]])
    with torch.no_grad():
        return lm.model(input_ids=ids).logits


def test_a_hub_id_finds_the_folder_the_guide_downloads_into(in_tmp, tiny_model_dir, tiny_lm):
    shutil.copytree(tiny_model_dir, in_tmp / "models" / "tiny-gemma")
    found = resolve_model("someorg/tiny-gemma")
    assert found.where == "models folder" and found.source == "models/tiny-gemma"
    lm = load_model("someorg/tiny-gemma", device="cpu", dtype="float32")
    assert lm.model_id == "someorg/tiny-gemma"  # probes are named by the id, not the folder
    assert lm.info["found_in"] == "models folder"
    assert torch.equal(_logits(lm), _logits(tiny_lm))


def test_a_hub_id_finds_the_hugging_face_cache(in_tmp, tiny_model_dir, tiny_lm, monkeypatch):
    import huggingface_hub.constants as hub

    cache = in_tmp / "hub"
    repo = cache / "models--someorg--tiny-gemma"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    shutil.copytree(tiny_model_dir, repo / "snapshots" / "0123abcd")
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(cache))
    lm = load_model("someorg/tiny-gemma", device="cpu", dtype="float32")
    assert lm.info["found_in"] == "hub cache"
    assert lm.model_id == "someorg/tiny-gemma"
    assert torch.equal(_logits(lm), _logits(tiny_lm))


def test_a_missing_gated_model_gives_the_download_line_and_the_licence(in_tmp):
    with pytest.raises(ModelSpecError) as info:
        load_model("google/gemma-3-4b-pt", device="cpu")
    message = str(info.value)
    line = (
        "HF_HUB_OFFLINE=0 .venv/bin/hf download google/gemma-3-4b-pt "
        "--local-dir models/gemma-3-4b-pt"
    )
    assert download_command("google/gemma-3-4b-pt") == line
    assert line in message
    assert "licence-gated" in message and "https://huggingface.co/google/gemma-3-4b-pt" in message
    assert "hf auth login" in message


def test_a_missing_open_model_has_no_licence_note(in_tmp):
    with pytest.raises(ModelSpecError) as info:
        resolve_model("HuggingFaceTB/SmolLM2-135M")
    assert "--local-dir models/SmolLM2-135M" in str(info.value)
    assert "licence" not in str(info.value)


def test_the_guide_and_the_4b_config_agree_on_one_download(in_tmp):
    """The download command in docs/own-model.md fills the folder that the 4B config's
    model id resolves to."""
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[2]
    config = yaml.safe_load((repo / "configs" / "gemma-3-4b.yaml").read_text())
    guide = (repo / "docs" / "own-model.md").read_text()
    assert download_command(config["model"]) in guide


def test_a_downloaded_folder_serves_a_dummy_load(in_tmp, tiny_model_dir):
    """``model_load_format=dummy`` on a hub id reads the downloaded folder's config (the
    tiny one here), not the shipped 4B config."""
    shutil.copytree(tiny_model_dir, in_tmp / "models" / "gemma-3-4b-pt")
    lm = load_model("google/gemma-3-4b-pt", device="cpu", load_format="dummy")
    assert lm.model_id == "dummy:gemma-3-4b-pt"
    assert lm.n_layers == 4 and lm.info["tokenizer"] == "models/gemma-3-4b-pt"
