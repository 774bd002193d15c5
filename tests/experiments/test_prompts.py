"""Probe, centroid and generation texts: disjoint splits, sizes, and no prompt leakage.

Pure functions of the committed concept graph: no WordNet access is needed here.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.concepts import (
    Concept,
    ConceptGraph,
    NegativeConcept,
    concept_words,
    load_concepts,
    mentions,
)
from experiments.prompts import (
    EVAL_NEUTRAL_SENTENCES,
    EVAL_NEUTRAL_TEMPLATES,
    EVAL_TEMPLATES,
    GENERATION_PROMPTS,
    TRAIN_NEUTRAL_SENTENCES,
    TRAIN_NEUTRAL_TEMPLATES,
    TRAIN_TEMPLATES,
    PromptError,
    assert_disjoint,
    centroid_texts,
    probe_eval_set,
    probe_training_set,
    render_generation_prompts,
    split_negatives,
)

COMMITTED = Path(__file__).resolve().parents[2] / "data" / "concepts" / "wordnet_top10.json"


@pytest.fixture(scope="module")
def graph() -> ConceptGraph:
    return load_concepts(COMMITTED)


@functools.cache
def _cached_graph() -> ConceptGraph:
    return load_concepts(COMMITTED)


def _subject(example) -> str:
    return example.source.rsplit(":", 1)[-1]


def test_template_pools_are_partitioned() -> None:
    for pos in ("n", "v"):
        assert not set(TRAIN_TEMPLATES[pos]) & set(EVAL_TEMPLATES[pos])
        assert TRAIN_TEMPLATES[pos][0] == "What is {name}?"
    assert not set(TRAIN_NEUTRAL_SENTENCES) & set(EVAL_NEUTRAL_SENTENCES)
    assert not set(TRAIN_NEUTRAL_TEMPLATES) & set(EVAL_NEUTRAL_TEMPLATES)


def test_one_by_one_by_one_is_the_pilot_set(graph: ConceptGraph) -> None:
    for concept in graph:
        pos, neg, neutral = probe_training_set(concept, graph)
        assert (pos.text, pos.label, pos.kind) == (f"What is {concept.name}?", 1, "positive")
        assert neg.kind == "negative" and neg.label == 0
        names = {n.name for n in split_negatives(concept).train}
        assert any(neg.text == f"What is {name}?" for name in names)
        assert neutral.kind == "neutral" and neutral.label == 0


@pytest.mark.parametrize("sizes", [(1, 1, 1), (5, 5, 5), (10, 10, 10), (3, 7, 2), (10, 0, 10)])
def test_training_and_evaluation_never_overlap(graph: ConceptGraph, sizes) -> None:
    n_pos, n_neg, n_neutral = sizes
    for concept in graph:
        train = probe_training_set(concept, graph, n_pos, n_neg, n_neutral)
        evaluation = probe_eval_set(concept, graph)
        assert_disjoint(train, evaluation)
        assert [e.kind for e in train] == ["positive"] * n_pos + ["negative"] * n_neg + [
            "neutral"
        ] * n_neutral
        assert len({e.text for e in train}) == len(train)
        # different negative synsets and different neutral sources, not only different texts
        train_neg = {_subject(e) for e in train if e.kind == "negative"}
        eval_neg = {_subject(e) for e in evaluation if e.kind == "negative"}
        assert not train_neg & eval_neg
        train_neutral = {e.source.split(":", 2)[2] for e in train if e.kind == "neutral"}
        eval_neutral = {e.source.split(":", 2)[2] for e in evaluation if e.kind == "neutral"}
        assert not {s for s in train_neutral if s.startswith("pool")} & eval_neutral


@settings(max_examples=40, deadline=None)
@given(
    index=st.integers(0, 9),
    n_pos=st.integers(0, 10),
    n_neg=st.integers(0, 10),
    n_neutral=st.integers(0, 10),
    train_seed=st.integers(0, 1000),
    eval_seed=st.integers(0, 1000),
)
def test_disjoint_for_any_sizes_and_seeds(
    index: int, n_pos: int, n_neg: int, n_neutral: int, train_seed: int, eval_seed: int
) -> None:
    graph = _cached_graph()
    concept = graph.concepts[index]
    train = probe_training_set(concept, graph, n_pos, n_neg, n_neutral, seed=train_seed)
    evaluation = probe_eval_set(concept, graph, seed=eval_seed)
    assert_disjoint(train, evaluation)
    assert len(train) == n_pos + n_neg + n_neutral
    if n_pos:
        assert train[0].text == f"What is {concept.name}?"


def test_evaluation_set_is_twenty_per_class(graph: ConceptGraph) -> None:
    for concept in graph:
        evaluation = probe_eval_set(concept, graph)
        kinds = [e.kind for e in evaluation]
        assert kinds.count("positive") == kinds.count("negative") == kinds.count("neutral") == 20
        assert len({e.text for e in evaluation}) == 60
        assert all(e.label == (1 if e.kind == "positive" else 0) for e in evaluation)
        assert len({_subject(e) for e in evaluation if e.kind == "negative"}) == 20
        words = concept_words(concept.lemmas)
        for example in evaluation:
            if example.kind == "positive":
                assert concept.name.lower() in example.text.lower() or any(
                    lemma.lower() in example.text.lower() for lemma in concept.lemmas
                ), example
        for example in evaluation + probe_training_set(concept, graph, 10, 10, 10):
            if example.kind == "neutral":
                assert not mentions(example.text, words), example


def test_sets_are_deterministic_and_seeded(graph: ConceptGraph) -> None:
    concept = graph.get("herb.n.01")
    a = probe_training_set(concept, graph, 5, 5, 5, seed=3)
    assert a == probe_training_set(concept, graph, 5, 5, 5, seed=3)
    assert a != probe_training_set(concept, graph, 5, 5, 5, seed=4)
    assert probe_eval_set(concept, graph, seed=1) == probe_eval_set(concept, graph, seed=1)


def test_asserting_disjointness_catches_overlap(graph: ConceptGraph) -> None:
    concept = graph.concepts[0]
    train = probe_training_set(concept, graph, 2, 2, 2)
    with pytest.raises(PromptError, match="in both training and evaluation"):
        assert_disjoint(train, train[:1])


def test_too_many_asked_is_a_clear_error(graph: ConceptGraph) -> None:
    with pytest.raises(PromptError, match="neutral"):
        probe_training_set(graph.concepts[0], graph, 1, 1, 500)
    with pytest.raises(PromptError, match=">= 0"):
        probe_training_set(graph.concepts[0], graph, -1, 1, 1)


@pytest.mark.parametrize("n", [1, 5, 8, 12])
def test_centroid_texts_have_n_each_and_no_generation_prompt(graph: ConceptGraph, n: int) -> None:
    for concept in graph:
        texts = centroid_texts(concept, n=n)
        assert set(texts) == {"core", "boundary", "negative"}
        assert all(len(items) == n for items in texts.values())
        prompts = [p.lower() for p in render_generation_prompts(concept)]
        for text in texts["core"]:
            lowered = text.lower()
            assert "tell me about" not in lowered
            assert not any(p in lowered for p in prompts)
        assert texts["negative"][0] == f"What is NOT {concept.name}?"
        if n <= 8:  # every concept has at least 8 distinct definitional phrasings
            assert len(set(texts["core"])) == n


def test_centroid_texts_content(graph: ConceptGraph) -> None:
    person = graph.get("person.n.01")
    texts = centroid_texts(person)
    assert texts["core"][0] == "Person: a human being."
    assert texts["core"][1] == "Define person. It is a human being."
    assert "Person is a type of organism." in texts["boundary"] or (
        "Person is a type of causal agent." in texts["boundary"]
    )
    split = split_negatives(person)
    centroid_names = {n.name for n in split.centroid}
    used = {t.split(":")[0].lower() for t in texts["negative"][1:]}
    assert used <= {name.lower() for name in centroid_names}
    others = {n.name.lower() for n in split.train + split.eval}
    assert not used & others


def test_negative_split_is_disjoint(graph: ConceptGraph) -> None:
    for concept in graph:
        split = split_negatives(concept)
        assert (len(split.eval), len(split.centroid), len(split.train)) == (20, 10, 10)
        ids = [n.synset for n in split.eval + split.centroid + split.train]
        assert len(set(ids)) == 40


def test_sparse_concept_is_padded() -> None:
    """A concept with no relations, examples or extra lemmas still gets n texts of each kind."""
    negatives = [
        NegativeConcept(f"thing{i}.n.01", f"thing{i}", [f"thing{i}"], f"gloss {i}", 7)
        for i in range(4)
    ]
    concept = Concept(
        synset="widget.n.01",
        name="widget",
        pos="n",
        lemmas=["widget"],
        gloss="a small device",
        examples=[],
        n_links=0,
        related={},
        negatives=negatives,
    )
    texts = centroid_texts(concept, n=6)
    assert all(len(items) == 6 for items in texts.values())
    train = probe_training_set(concept, None, 3, 3, 3)
    evaluation = probe_eval_set(concept, None, n_per_class=8)
    assert_disjoint(train, evaluation)
    with pytest.raises(PromptError, match="negatives"):
        split_negatives(Concept(**{**concept.__dict__, "negatives": negatives[:1]}))


def test_generation_prompts() -> None:
    assert GENERATION_PROMPTS == (
        "Tell me about {concept}.",
        "Tell me about something.",
        "Here is a story:",
    )
    assert render_generation_prompts("bird genus") == [
        "Tell me about bird genus.",
        "Tell me about something.",
        "Here is a story:",
    ]
    assert render_generation_prompts("x", ["About {concept}: {concept}"]) == ["About x: x"]
