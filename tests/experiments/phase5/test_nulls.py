"""Model-distribution null vectors for every concept, at the vector set's α and β."""

from __future__ import annotations

import torch

from experiments.concepts import load_concepts
from experiments.config import load_config
from experiments.kernel.vectors import VectorSet, random_directions
from experiments.phase5.nulls import build_model_nulls, null_family
from steering.vector import SteeringVector


def test_nulls_per_concept_at_the_same_scale(tiny_lm, one_thread):
    config = load_config()
    graph = load_concepts(config.concepts.file, limit=5)
    layer, alpha = 2, 17.0
    vectors = {
        c.synset: SteeringVector.from_direction(
            random_directions(9, c.synset, 1, tiny_lm.hidden_size)[0], layer, alpha=alpha
        )
        for c in graph.concepts
    }
    vset = VectorSet(layer, alpha, vectors)
    nulls = build_model_nulls(tiny_lm, graph, vset, seed=0, k_neutral=3, k_other=2)
    assert list(nulls) == graph.synsets
    for synset, arms in nulls.items():
        names = [a for a, _ in arms]
        assert names[:3] == ["null:neutral:0", "null:neutral:1", "null:neutral:2"]
        assert all(n.startswith("null:other:") and n != f"null:other:{synset}" for n in names[3:])
        for name, v in arms:
            assert v.alpha == alpha and v.beta == vset.vectors[synset].beta and v.layer == layer
            assert abs(float(v.direction.norm()) - 1.0) < 1e-6
            if name.startswith("null:other:"):
                other = vectors[name.removeprefix("null:other:")].direction
                assert torch.allclose(v.direction, other)
    assert null_family("null:neutral:2") == "null:neutral"
    assert null_family("null:other:herb.n.01") == "null:other"
    assert null_family("random:0") == "random" and null_family("concept") == "concept"
    again = build_model_nulls(tiny_lm, graph, vset, seed=0, k_neutral=3, k_other=2)
    first = nulls[graph.synsets[0]][0][1].direction
    assert torch.equal(first, again[graph.synsets[0]][0][1].direction)
