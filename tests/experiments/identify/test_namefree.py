"""Name-free texts: no test positive and no on-concept likelihood text names its concept,
the two share no related name, and the off-concept partner mentions neither."""

from __future__ import annotations

import collections
import string
from pathlib import Path

import pytest

from experiments.concepts import ConceptGraph, concept_words, load_concepts, mentions
from experiments.identify.namefree import (
    LIKELIHOOD_FRAMES,
    TEST_FRAMES,
    avoided_words,
    name_free_likelihood_texts,
    name_free_positives,
    name_halves,
    taxonomic,
)

DATA = Path(__file__).resolve().parents[3] / "data" / "concepts"


@pytest.fixture(scope="module")
def graphs() -> list[ConceptGraph]:
    return [load_concepts(DATA / f) for f in ("wordnet_top50.json", "wordnet_51to100.json")]


def test_no_frame_word_is_a_concept_word_of_either_committed_graph(graphs):
    words = set().union(*(concept_words(c.lemmas) for g in graphs for c in g))
    bare = [
        string.Formatter().vformat(t, (), collections.defaultdict(str))
        for pools in (LIKELIHOOD_FRAMES, TEST_FRAMES)
        for pool in pools.values()
        for t in pool
    ]
    assert not [t for t in bare if mentions(t, words)]


def test_positives_and_likelihood_texts_never_name_the_concept(graphs):
    graph = graphs[1]
    texts = name_free_likelihood_texts(graph, graph.synsets, 10, seed=0)
    covered = 0
    uncovered = []
    for concept in graph.concepts:
        avoid = avoided_words(concept)
        positives = name_free_positives(concept, 20, seed=0)
        assert not [t for t in positives if mentions(t, avoid)], concept.synset
        on = texts.on.get(concept.synset, [])
        assert not [t for t in on if mentions(t, avoid)], concept.synset
        if not on:
            uncovered.append(concept)
        if on:
            covered += 1
            # a verb with three object-taking names has only so many distinct texts
            assert len(positives) >= 5 and len(on) == 10
            related = {n for half in name_halves(concept, 0) for n in half}
            # the partner mentions neither the concept nor anything under it
            assert not [t for t in texts.off[concept.synset] if mentions(t, avoid | related)]
            assert concept.synset not in texts.off_source[concept.synset]
            # a noun's text is paired with a noun's (same frame pool), a verb's with a verb's
            pos = {graph.get(o).pos == "v" for o in texts.off_source[concept.synset]}
            assert pos == {concept.pos == "v"}, concept.synset
    # all but concepts with too few names under them: since v3 the taxonomic ones, whose
    # names are all Latin (genera, families, orders)
    assert covered >= 42
    assert all(taxonomic(c.name, c.synset) for c in uncovered), [c.synset for c in uncovered]


def test_the_two_halves_of_names_are_disjoint_and_seeded(graphs):
    concept = graphs[1].get("vine.n.01")
    test, likelihood = name_halves(concept, seed=0)
    assert test and likelihood and not set(test) & set(likelihood)
    assert name_halves(concept, seed=0) == (test, likelihood)
    assert name_halves(concept, seed=1) != (test, likelihood)
    # "African country" would all but name Africa: derived forms are avoided too
    africa = graphs[1].get("africa.n.01")
    assert not [n for half in name_halves(africa, 0) for n in half if "Africa" in n]
