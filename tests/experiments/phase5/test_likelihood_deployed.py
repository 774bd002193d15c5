"""The likelihood outcome of a run's vectors as generation steers them, on the tiny random
Gemma 3: a file steered at several layers with its own norms × k scores as plain torch
hooks adding s·k·v_l at every layer give; its model nulls are shaped like it; a one-layer
vector scores as it did before several layers were allowed; and a concept with no other
concept's texts to pair with is not scored, with the reason in its texts' file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from experiments.config import load_config
from experiments.kernel.lifecycle import load_graph
from experiments.kernel.vectors import VectorSet, deployed_random, random_directions
from experiments.likelihood_texts import LikelihoodTexts
from experiments.phase5.likelihood import score_likelihood, texts_for
from experiments.phase5.nulls import build_model_nulls
from experiments.rundir import RunDir
from steering.likelihood import encode_texts, likelihood_outcomes
from steering.vector import Direction, SteeringVector

LAYER, ALPHA, K = 2, 15.0, 2.0
LAYERS = (1, 2, 3)


def config_of(tmp, *extra: str):
    return load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=2",
            "layer=2",
            "likelihood.enabled=true",
            "likelihood.texts=4",
            "likelihood.neutral_nulls=1",
            "likelihood.other_nulls=1",
            "controls.random_directions=1",
            f"classifier.dir={tmp / 'cls'}",
            f"tracking.results_dir={tmp / 'res'}",
            *extra,
        ],
    )


def unit_vectors(graph, hidden) -> dict[str, SteeringVector]:
    return {
        c.synset: SteeringVector.from_direction(
            random_directions(4, c.synset, 1, hidden)[0], LAYER, alpha=ALPHA
        )
        for c in graph.concepts
    }


def deployed_set(graph, hidden, seed) -> VectorSet:
    """Each concept's file vector at layers 1-3, each of its own norm, at k (scale file);
    built as ``kernel/vectors.deployed_vector`` builds them."""
    rng = np.random.default_rng(seed)
    vectors = {}
    for synset, v in unit_vectors(graph, hidden).items():
        per_layer = {
            n: torch.from_numpy((rng.normal(size=hidden) * (1 + n)).astype(np.float32))
            for n in LAYERS
        }
        vectors[synset] = SteeringVector(
            direction=v.direction,
            layer=LAYER,
            alpha=ALPHA,
            source="file",
            per_layer=per_layer,
            coefficient=K,
        )
    random = {c: deployed_random(0, c, v, 1, hidden) for c, v in vectors.items()}
    return VectorSet(LAYER, ALPHA, vectors, random)


def hooked_loglik(lm, texts, prefix, added: dict[int, torch.Tensor]) -> np.ndarray:
    """Each text alone, unpadded, under plain forward hooks adding ``added[n]`` at layer
    n: the mean log-probability of its tokens."""
    handles = [
        lm.layer(n).register_forward_hook(
            lambda _m, _i, out, v=v: (out[0] + v, *out[1:]) if isinstance(out, tuple) else out + v
        )
        for n, v in added.items()
    ]
    values = []
    try:
        for enc in encode_texts(lm, texts, prefix):
            ids = torch.tensor([enc.ids])
            with torch.inference_mode():
                lp = torch.log_softmax(lm.model(input_ids=ids).logits[0].double(), dim=-1)
            start = len(enc.prefix)
            values.append(np.mean([float(lp[t - 1, ids[0, t]]) for t in range(start, len(ids[0]))]))
    finally:
        for h in handles:
            h.remove()
    return np.array(values)


@pytest.fixture
def deployed(tmp_path, tiny_lm, one_thread):
    config = config_of(tmp_path)
    graph = load_graph(config)
    vset = deployed_set(graph, tiny_lm.hidden_size, seed=7)
    run_dir = RunDir(tmp_path / "res", "run")
    assert score_likelihood(config, graph, tiny_lm, vset, run_dir) == 2
    return config, graph, vset, run_dir


def test_a_file_at_several_layers_scores_as_hooks_adding_s_k_v_l_at_each(deployed, tiny_lm):
    config, graph, vset, run_dir = deployed
    records = run_dir.read_likelihood()
    texts = texts_for(run_dir, config, graph)
    synset = graph.synsets[0]
    vector = vset.vectors[synset]
    assert vector.per_layer is not None
    for s in (-1.0, 1.0):
        added = {n: s * K * v for n, v in vector.per_layer.items()}
        mine = [
            r for r in records if r["concept"] == synset and r["arm"] == "concept"
            and r["strength"] == s
        ]  # fmt: skip
        assert [r["ll_on"] for r in mine] == pytest.approx(
            hooked_loglik(tiny_lm, texts.on[synset], config.likelihood.prefix, added), abs=1e-4
        )
        assert [r["ll_off"] for r in mine] == pytest.approx(
            hooked_loglik(tiny_lm, texts.off[synset], config.likelihood.prefix, added), abs=1e-4
        )
    assert {r["arm"] for r in records if r["concept"] == synset} == {
        "concept", "random:0", "null:neutral:0", f"null:other:{graph.synsets[1]}",
    }  # fmt: skip
    assert not [h for n in range(tiny_lm.n_layers) for h in ours(tiny_lm.layer(n))]


def ours(layer) -> list[object]:
    """The forward hooks on ``layer`` that this project defined (transformers may keep its
    own output-capturing hooks there once hidden states were asked for)."""
    hooks = [getattr(h, "func", h) for h in layer._forward_hooks.values()]
    return [
        h for h in hooks
        if (getattr(h, "__module__", None) or type(h).__module__).split(".")[0]
        in ("steering", "experiments")
    ]  # fmt: skip


def test_the_model_nulls_of_a_deployed_vector_have_its_layers_and_norms(deployed, tiny_lm):
    config, graph, vset, _ = deployed
    nulls = build_model_nulls(tiny_lm, graph, vset, config.seed, 1, 1)
    one_layer = build_model_nulls(
        tiny_lm, graph, VectorSet(LAYER, ALPHA, unit_vectors(graph, tiny_lm.hidden_size)),
        config.seed, 1, 1,
    )  # fmt: skip
    first, second = graph.synsets
    mine = vset.vectors[first]
    assert mine.per_layer is not None
    for (arm, null), (arm_1, plain) in zip(nulls[first], one_layer[first], strict=True):
        assert arm == arm_1 and null.coefficient == K and null.layers == LAYERS
        assert torch.allclose(null.direction, plain.direction, atol=1e-6)  # the run's layer
        assert null.per_layer is not None
        for n, v in null.per_layer.items():
            assert float(v.norm()) == pytest.approx(float(mine.per_layer[n].norm()), rel=1e-5)
    other = dict(nulls[first])[f"null:other:{second}"]
    theirs = vset.vectors[second].per_layer
    assert other.per_layer is not None and theirs is not None
    for n in LAYERS:
        cos = torch.nn.functional.cosine_similarity(other.per_layer[n], theirs[n], dim=0)
        assert float(cos) == pytest.approx(1.0, abs=1e-5)


def test_a_one_layer_vector_scores_as_before(tmp_path, tiny_lm, one_thread):
    """The stage's records for a one-layer unit vector are the call it made before
    several layers were allowed: the vector's direction at β·α."""
    config = config_of(tmp_path)
    graph = load_graph(config)
    vectors = unit_vectors(graph, tiny_lm.hidden_size)
    vset = VectorSet(LAYER, ALPHA, vectors)
    run_dir = RunDir(tmp_path / "res", "run")
    score_likelihood(config, graph, tiny_lm, vset, run_dir)
    texts = texts_for(run_dir, config, graph)
    nulls = build_model_nulls(tiny_lm, graph, vset, config.seed, 1, 1)
    beta = float(config.steering.beta)
    lk = config.likelihood
    want = []
    for synset in graph.synsets:
        arms = [("concept", vectors[synset]), *nulls[synset]]
        want += [
            {**r, "beta": beta}
            for r in likelihood_outcomes(
                tiny_lm, LAYER, beta * ALPHA, {synset: texts.on[synset]},
                {synset: texts.off[synset]},
                [Direction(synset, arm, v.direction) for arm, v in arms],
                [s for s in config.steering.strengths if s != 0], config.steering.mode,
                lk.prefix, batch_size=lk.batch_size,
            )
        ]  # fmt: skip
    assert run_dir.read_likelihood() == want


def test_a_concept_with_no_other_concepts_texts_is_not_scored_and_says_why(
    tmp_path, tiny_lm, one_thread
):
    config = config_of(tmp_path, "concepts.limit=1")
    graph = load_graph(config)
    (synset,) = graph.synsets
    run_dir = RunDir(tmp_path / "res", "run")
    vset = VectorSet(LAYER, ALPHA, unit_vectors(graph, tiny_lm.hidden_size))
    lines: list[str] = []
    assert score_likelihood(config, graph, tiny_lm, vset, run_dir, say=lines.append) == 0
    assert run_dir.read_likelihood() == []
    saved = json.loads(run_dir.file(RunDir.LIKELIHOOD_TEXTS).read_text())
    assert saved["off"] == {synset: []} and len(saved["on"][synset]) == 4
    assert "no other concept's text" in saved["unpaired"][synset]
    assert "(the run has no other concept)" in saved["unpaired"][synset]
    assert any("not scored" in line for line in lines)
    again = texts_for(run_dir, config, graph)
    assert isinstance(again, LikelihoodTexts) and again.unpaired == saved["unpaired"]
