"""Probe, centroid and generation texts: disjoint splits, sizes, and no prompt leakage.

Pure functions of the committed concept graph: no WordNet access is needed here.
"""

from __future__ import annotations

import collections
import functools
import string
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
    FORMAT_AXIS_REWRITES,
    FORMATS,
    GENERATION_PROMPTS,
    PROBE_TEMPLATES,
    SCALE_NEUTRAL_SENTENCES,
    SPLITS,
    PromptError,
    assert_disjoint,
    centroid_texts,
    format_axis_texts,
    probe_eval_set,
    probe_templates,
    probe_training_set,
    render_generation_prompts,
    scale_neutral_texts,
    split_negatives,
    template_sequence,
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


def _template(example) -> str:
    """The template id part of a source, e.g. 't07'."""
    return example.source.split(":")[3]


def test_template_pools_are_partitioned_and_format_balanced() -> None:
    texts = {split: {t.text for t in probe_templates(split)} for split in SPLITS}
    assert not texts["train"] & texts["validation"]
    assert not texts["train"] & texts["test"]
    assert not texts["validation"] & texts["test"]
    for split in SPLITS:
        sizes = {len(PROBE_TEMPLATES[split][fmt]) for fmt in FORMATS}
        assert len(sizes) == 1, f"{split} formats differ in size: {sizes}"
        assert set(PROBE_TEMPLATES[split]) == set(FORMATS)
    # the format axis pits exactly the TRAIN question templates against declarative rewrites
    assert set(FORMAT_AXIS_REWRITES) == set(PROBE_TEMPLATES["train"]["question"])
    assert not set(FORMAT_AXIS_REWRITES.values()) & set().union(*texts.values())


def test_templates_only_use_fields_every_subject_has() -> None:
    """POS-agnostic: name, Name, lemma and gloss only, and every template names its subject."""
    for split in SPLITS:
        for template in probe_templates(split):
            fields = {f for _, f, _, _ in string.Formatter().parse(template.text) if f}
            assert fields <= {"name", "Name", "lemma", "gloss"}, template
            assert fields & {"name", "Name", "lemma"}, template
            ends_question = template.text.rstrip().endswith("?")
            assert ends_question == (template.format == "question"), template
    for question, statement in FORMAT_AXIS_REWRITES.items():
        assert question.endswith("?") and statement.endswith(".")
        fields = {f for _, f, _, _ in string.Formatter().parse(question) if f}
        assert fields == {f for _, f, _, _ in string.Formatter().parse(statement) if f}


def test_no_template_word_is_a_concept_word(graph: ConceptGraph) -> None:
    """A template that mentioned "plant" or "order" would put a concept into every class."""
    words = set().union(*(concept_words(c.lemmas) for c in graph))
    bare = [
        string.Formatter().vformat(t.text, (), collections.defaultdict(str))
        for split in SPLITS
        for t in probe_templates(split)
    ]
    bare += [t for pair in FORMAT_AXIS_REWRITES.items() for t in pair]
    offenders = [t for t in bare if mentions(t, words)]
    assert not offenders


@pytest.mark.parametrize("split", SPLITS)
def test_template_sequence_cycles_formats(split: str) -> None:
    for seed in range(5):
        sequence = template_sequence(split, seed, "herb.n.01")
        assert sorted(t.id for t in sequence) == [t.id for t in probe_templates(split)]
        for start in range(0, len(sequence), 4):
            assert {t.format for t in sequence[start : start + 4]} == set(FORMATS)
    firsts = {template_sequence(split, seed, "herb.n.01")[0].format for seed in range(20)}
    assert len(firsts) > 1  # the format order is seeded, not fixed


def test_one_by_one_by_one_shares_one_template(graph: ConceptGraph) -> None:
    """The first release's 1x1x1 set was a question, a question and a statement; now the
    three texts share one template, so the form cannot tell the classes apart."""
    formats = set()
    for concept in graph:
        pos, neg, neutral = probe_training_set(concept, graph)
        assert (pos.label, pos.kind, neg.label, neg.kind) == (1, "positive", 0, "negative")
        assert neutral.kind == "neutral" and neutral.label == 0
        assert _template(pos) == _template(neg) == _template(neutral)
        assert pos.format == neg.format == neutral.format
        assert _subject(neg) in {n.synset for n in split_negatives(concept).train}
        assert _subject(neutral) in {n.synset for n in graph.neutral_pool[:30]}
        formats.add(pos.format)
    assert len(formats) > 1


@settings(max_examples=60, deadline=None)
@given(
    index=st.integers(0, 9),
    n_pos=st.integers(1, 16),
    n_neg=st.integers(0, 10),
    n_neutral=st.integers(0, 16),
    seed=st.integers(0, 10_000),
)
def test_classes_share_one_template_distribution(
    index: int, n_pos: int, n_neg: int, n_neutral: int, seed: int
) -> None:
    """Property: every class draws the same templates, so no surface form predicts the label.

    Training: each class's template sequence is a prefix of one sequence (identical
    multisets for equal sizes), and per class no format is over-represented by more than
    one. Evaluation: the negative class has exactly the positives' template multiset.
    """
    graph = _cached_graph()
    concept = graph.concepts[index]
    train = probe_training_set(concept, graph, n_pos, n_neg, n_neutral, seed=seed)
    sequence = [f"t{t.id:02d}" for t in template_sequence("train", seed, concept.synset)]
    for kind, n in (("positive", n_pos), ("negative", n_neg), ("neutral", n_neutral)):
        used = [_template(e) for e in train if e.kind == kind]
        assert used == sequence[:n]
        counts = collections.Counter(e.format for e in train if e.kind == kind)
        assert max(counts.values(), default=0) - min([counts.get(f, 0) for f in FORMATS]) <= 1
    if n_pos == n_neg == n_neutral:
        by_kind = {
            kind: sorted(_template(e) for e in train if e.kind == kind)
            for kind in ("positive", "negative", "neutral")
        }
        assert by_kind["positive"] == by_kind["negative"] == by_kind["neutral"]
    n_eval = max(2, n_pos)
    for split in ("validation", "test"):
        held = probe_eval_set(concept, graph, n_per_class=n_eval, seed=seed, split=split)
        positives = sorted(_template(e) for e in held if e.label == 1)
        negatives = sorted(_template(e) for e in held if e.label == 0)
        assert positives == negatives
        assert collections.Counter(e.format for e in held if e.label == 1) == (
            collections.Counter(e.format for e in held if e.label == 0)
        )


@pytest.mark.parametrize("sizes", [(1, 1, 1), (5, 5, 5), (10, 10, 10), (3, 7, 2), (10, 0, 10)])
def test_training_and_evaluation_never_overlap(graph: ConceptGraph, sizes) -> None:
    n_pos, n_neg, n_neutral = sizes
    for concept in graph:
        train = probe_training_set(concept, graph, n_pos, n_neg, n_neutral)
        validation = probe_eval_set(concept, graph, split="validation")
        test = probe_eval_set(concept, graph, split="test")
        assert_disjoint(train, test)
        assert_disjoint(train, validation)
        assert_disjoint(validation, test)
        assert [e.kind for e in train] == ["positive"] * n_pos + ["negative"] * n_neg + [
            "neutral"
        ] * n_neutral
        assert len({e.text for e in train}) == len(train)
        # different negative synsets and different neutral subjects, not only different texts
        for kind in ("negative", "neutral"):
            groups = [{_subject(e) for e in s if e.kind == kind} for s in (train, validation, test)]
            assert not groups[0] & groups[1] and not groups[0] & groups[2]
            assert not groups[1] & groups[2]


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
    for split in ("validation", "test"):
        assert_disjoint(train, probe_eval_set(concept, graph, seed=eval_seed, split=split))
    assert len(train) == n_pos + n_neg + n_neutral


def test_evaluation_splits_are_balanced(graph: ConceptGraph) -> None:
    for concept in graph:
        for split in ("validation", "test"):
            held = probe_eval_set(concept, graph, split=split)
            kinds = [e.kind for e in held]
            assert kinds.count("positive") == 20
            assert kinds.count("negative") == kinds.count("neutral") == 10
            assert len({e.text for e in held}) == 40
            assert all(e.label == (1 if e.kind == "positive" else 0) for e in held)
            assert all(e.source.startswith(f"{split}:") for e in held)
            assert len({_subject(e) for e in held if e.kind == "negative"}) == 10
            words = concept_words(concept.lemmas)
            for example in held:
                if example.kind == "positive":
                    assert concept.name.lower() in example.text.lower() or any(
                        lemma.lower() in example.text.lower() for lemma in concept.lemmas
                    ), example
            for example in held + probe_training_set(concept, graph, 10, 10, 10):
                if example.kind == "neutral":
                    assert not mentions(example.text, words), example
    odd = probe_eval_set(graph.concepts[0], graph, n_per_class=5)
    assert [e.kind for e in odd].count("negative") == 3
    assert [e.kind for e in odd].count("neutral") == 2


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
    with pytest.raises(PromptError, match="at most 24"):
        probe_eval_set(graph.concepts[0], graph, n_per_class=25)
    with pytest.raises(PromptError, match="validation"):
        probe_eval_set(graph.concepts[0], graph, split="train")


def test_format_axis_texts_pair_questions_with_rewrites_on_neutral_subjects(
    graph: ConceptGraph,
) -> None:
    questions, statements = format_axis_texts(graph)
    n_subjects = len(graph.neutral_pool) // 2
    assert len(questions) == len(statements) == len(FORMAT_AXIS_REWRITES) * n_subjects
    assert all(q.endswith("?") for q in questions)
    assert not any(s.endswith("?") for s in statements)
    question, statement = next(iter(FORMAT_AXIS_REWRITES.items()))
    name = graph.neutral_pool[1].name  # template-major: text 1 is template 0, subject 1
    assert questions[1] == question.format(name=name, lemma=name)
    assert statements[1] == statement.format(name=name, lemma=name)
    with pytest.raises(PromptError, match="neutral pool"):
        format_axis_texts(None)


def test_scale_texts_are_the_first_release_neutrals(graph: ConceptGraph) -> None:
    """α is measured on the same texts as before, so steering strengths do not move."""
    texts = scale_neutral_texts(graph, 0)
    assert texts == sorted(set(texts))
    assert 20 <= len(texts) <= 50
    assert set(texts) & set(SCALE_NEUTRAL_SENTENCES)
    assert scale_neutral_texts(graph, 0) == texts
    assert scale_neutral_texts(None, 0) == []


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
    neutral = ConceptGraph(**{**_cached_graph().__dict__, "concepts": [concept]})
    train = probe_training_set(concept, neutral, 3, 3, 3)
    evaluation = probe_eval_set(concept, neutral, n_per_class=8)
    assert_disjoint(train, evaluation)
    with pytest.raises(PromptError, match="neutral"):  # no graph, no neutral subjects
        probe_training_set(concept, None, 3, 3, 3)
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
