"""The likelihood texts: on-concept, paired off-concept, disjoint from every reserved text."""

from __future__ import annotations

import collections
import string
from pathlib import Path

import pytest

from experiments.concepts import ConceptGraph, concept_words, load_concepts, mentions
from experiments.config import load_config
from experiments.kernel.probes import build_probe_texts
from experiments.likelihood_texts import (
    LIKELIHOOD_TEMPLATES,
    build_likelihood_texts,
    check_disjoint,
    on_concept_texts,
    reserved_texts,
)
from experiments.prompts import PromptError, centroid_texts

DATA = Path(__file__).resolve().parents[2] / "data" / "concepts"


@pytest.fixture(scope="module")
def graph() -> ConceptGraph:
    return load_concepts(DATA / "wordnet_top10.json")


@pytest.fixture(scope="module")
def graph50() -> ConceptGraph:
    return load_concepts(DATA / "wordnet_top50.json", limit=50)


def test_no_template_word_is_a_concept_word(graph50: ConceptGraph) -> None:
    """A frame that said "plant", "time" or "move" would mention a concept by itself."""
    words = set().union(*(concept_words(c.lemmas) for c in graph50))
    bare = [
        string.Formatter().vformat(t, (), collections.defaultdict(str))
        for pool in LIKELIHOOD_TEMPLATES.values()
        for t in pool
    ]
    assert not [t for t in bare if mentions(t, words)]


@pytest.mark.parametrize("seed", [0, 1])
def test_texts_are_disjoint_from_the_default_runs_probe_and_centroid_texts(graph, seed):
    """Checked against the texts the pipeline itself builds (not against reserved_texts):
    the default probe splits and centroids, and the largest training set."""
    texts = build_likelihood_texts(graph, seed=seed)
    ours = [t.lower() for c in texts.on for t in texts.on[c]]
    for train in ("1x1x1", "16x16x16"):
        config = load_config(overrides=[f"seed={seed}", f"classifier.train={train}"])
        probe = build_probe_texts(config, graph).all_texts()
        centroid = [
            t
            for c in graph.concepts
            for ts in centroid_texts(c, config.centroids.texts_per_centroid, seed).values()
            for t in ts
        ]
        for other in (*probe, *centroid):
            other = other.lower()
            assert not [t for t in ours if t == other or t in other or other in t]


def test_texts_are_disjoint_on_the_fifty_concept_graph(graph50):
    texts = build_likelihood_texts(graph50)
    check_disjoint([t for c in texts.on for t in texts.on[c]], reserved_texts(graph50, 0))
    assert len(texts.on) == 50 and all(len(v) == 10 for v in texts.on.values())


def test_the_check_catches_equal_and_contained_texts(graph):
    reserved = reserved_texts(graph, 0)
    probe = build_probe_texts(load_config(), graph).train[graph.concepts[0].synset][0].text
    with pytest.raises(PromptError, match="overlap"):
        check_disjoint([probe.upper()], reserved)  # equal, case aside
    with pytest.raises(PromptError, match="overlap"):
        check_disjoint([probe[: len(probe) // 2 + 3]], reserved)  # contained in one
    with pytest.raises(PromptError, match="overlap"):
        check_disjoint([f"As the teacher said: {probe} And so on."], reserved)  # contains one
    check_disjoint(["A sentence nobody reserved, about nothing much."], reserved)


def test_on_texts_name_their_concept_and_off_texts_do_not(graph):
    texts = build_likelihood_texts(graph)
    for concept in graph.concepts:
        on, off = texts.on[concept.synset], texts.off[concept.synset]
        words = concept_words(concept.lemmas)
        assert len(on) == len(off) == 10 and len(set(on)) == 10 and len(set(off)) == 10
        assert all(mentions(t, words) for t in on), concept.synset
        assert not any(mentions(t, words) for t in off), concept.synset
        sources = texts.off_source[concept.synset]
        assert concept.synset not in sources
        assert all(t in texts.on[s] for t, s in zip(off, sources, strict=True))


def test_noun_pairs_share_their_frame_and_are_length_matched(graph):
    """Pair i is the same sentence frame about another concept (nouns: 9 other nouns here),
    so the pair differs by the subject only."""
    texts = build_likelihood_texts(graph)
    frames = {t: i for pool in LIKELIHOOD_TEMPLATES.values() for i, t in enumerate(pool)}

    def frame(text):
        return next(t for t in frames if _fits(t, text))

    for concept in graph.concepts:
        if concept.pos == "v":
            continue
        for on, off in zip(texts.on[concept.synset], texts.off[concept.synset], strict=True):
            assert frame(on) == frame(off)
            assert abs(len(on.split()) - len(off.split())) <= 4


def _fits(template: str, text: str) -> bool:
    """Whether ``text`` is ``template`` with its fields filled (literal parts in order)."""
    parts = [p for p, *_ in string.Formatter().parse(template)]
    pos = 0
    for part in parts:
        found = text.find(part, pos)
        if part and found < 0:
            return False
        pos = found + len(part) if part else pos
    return text.endswith(parts[-1]) if parts[-1] else True


def test_texts_are_seeded(graph):
    first = build_likelihood_texts(graph, seed=0)
    assert first == build_likelihood_texts(graph, seed=0)
    assert first.on != build_likelihood_texts(graph, seed=1).on


def test_length_can_be_a_token_count(graph):
    by_chars = build_likelihood_texts(graph, length=len)
    by_words = build_likelihood_texts(graph)
    assert by_chars.on == by_words.on
    with pytest.raises(PromptError, match="at least 2"):
        build_likelihood_texts(graph, n=1)


def test_own_concepts_without_narrower_terms_get_fewer_texts_with_a_warning():
    own = load_concepts(DATA / "own_example.json")  # no "narrower": no {example} frames
    with pytest.warns(UserWarning, match=r"blockchain: 5 of 10 likelihood texts .*narrower"):
        texts = build_likelihood_texts(own, 10)
    assert {len(t) for t in texts.on.values()} == {5}
    assert all(len(texts.off[c]) == len(texts.on[c]) for c in texts.on)
    with pytest.raises(PromptError, match=r"blockchain: only 0 likelihood texts.*narrower"):
        on_concept_texts(own.concepts[0], 10, reserved=[""])  # "" is in every text
