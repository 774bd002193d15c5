"""The embedded all-MiniLM-L6-v2 loads offline and embeds sensibly (real model, ~10 s)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from metrics.embedder import EmbedderError, embed, load_embedder, resolve_spec


@pytest.fixture(scope="module")
def embedder():
    return load_embedder("embedded", device="cpu")


def test_embedded_model_gives_normalised_384_dim_rows(embedder):
    vectors = embed(embedder, ["a dog barked at the cat", "justice is fairness in law"])
    assert vectors.shape == (2, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embed(embedder, []).shape == (0, 384)


def test_similarity_follows_meaning(embedder):
    text, dog, justice = embed(
        embedder,
        [
            "a dog barked at the cat",
            "A dog is a domesticated carnivorous mammal kept as a pet.",
            "justice is fairness in law",
        ],
    )
    assert float(text @ dog) > float(text @ justice)


def test_local_path_loads_same_model(embedder):
    path, local = resolve_spec("embedded")
    assert local
    same = load_embedder(path, device="cpu")
    np.testing.assert_allclose(
        embed(same, ["hello world"]), embed(embedder, ["hello world"]), atol=1e-6
    )


def test_seed_hub_name_resolves_to_embedded_copy():
    assert resolve_spec("sentence-transformers/all-MiniLM-L6-v2") == resolve_spec("embedded")


def test_unknown_name_offline_raises_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EmbedderError, match="not found locally and the hub is offline"):
        load_embedder("no-such-org/no-such-embedder-xyz", device="cpu")


def test_missing_local_path_raises(tmp_path):
    with pytest.raises(EmbedderError, match="does not exist"):
        load_embedder(str(tmp_path / "absent"), device="cpu")
