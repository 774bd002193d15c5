"""Templated texts for probes, centroids and generation: pure functions of a concept and a seed.

Why format-matched probe sets: the first release trained each probe on "What is X?"
(positive), "What is Y?" (negative) and a declarative neutral sentence, so half of every
probe weight was a question-versus-statement axis shared by all ten concepts (mean
pairwise cosine +0.46; docs/notes.md, 'The first release's directions'), and steering
with it made the model ask questions. Now every class (positive, negative, neutral) is
rendered from one POS-agnostic template pool whose templates are tagged with a surface
format (question, definition, statement, context). Per concept and split the templates
form one seeded sequence in which the formats cycle, and the ``i``-th text of every class
uses the ``i``-th template: with equal class sizes all three classes have identical
template multisets, otherwise each class uses a prefix of the same sequence. No surface
form predicts the label, at 1×1×1 included (one template, shared by the three texts).

Why partitioned pools: the original research evaluated its classifiers on texts re-drawn from
the training templates, so its F1 partly measured template memorisation. Here every source of
text is split once, by construction, not by chance:

* TRAIN, VALIDATION and TEST templates are disjoint, and each covers every format equally;
* a concept's negatives are split by position (see :func:`split_negatives`): evaluation,
  centroid and training negatives are different synsets, and the evaluation negatives are
  halved into validation and test negatives;
* neutral subjects come from the graph's neutral pool: its first half for training, its
  second half halved into validation and test subjects.

So training, validation and test never share a text, whatever the sizes or seeds (checked by
:func:`assert_disjoint` and the tests). The validation split only chooses a decision
threshold; the test split is balanced (``n`` positives against ``n`` negatives made of
negative-concept and neutral texts, half each) and its negative class uses exactly the
positives' templates.

The core centroid is built from definitional texts only and never contains a generation prompt:
the original core centroid included "Tell me about X.", so outputs that merely echoed the prompt
scored highest. :func:`centroid_texts` refuses to return such texts.

The module is longer than 500 lines because it holds the template tables themselves,
which are easier to audit for leaks between splits when they sit in one place.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

from experiments.concepts import (
    Concept,
    ConceptGraph,
    NegativeConcept,
    NeutralItem,
    concept_words,
    mentions,
    seeded_random,
)

Kind = Literal["positive", "negative", "neutral"]
LABELS: dict[str, int] = {"positive": 1, "negative": 0, "neutral": 0}
SPLITS: tuple[str, ...] = ("train", "validation", "test")
FORMATS: tuple[str, ...] = ("question", "definition", "statement", "context")

GENERATION_PROMPTS: tuple[str, ...] = (
    "Tell me about {concept}.",
    "Tell me about something.",
    "Here is a story:",
)
# Fragments of the generation prompts that no centroid text may contain.
_GENERATION_FRAGMENTS: tuple[str, ...] = ("tell me about", "here is a story")

# Negative layout (positions in Concept.negatives, which the build shuffled with its seed).
EVAL_NEGATIVES = 20
CENTROID_NEGATIVES = 10


class PromptError(ValueError):
    """Texts cannot be built as asked (too few templates, negatives or neutral subjects)."""


@dataclass(frozen=True)
class ProbeExample:
    """One labelled probe text; ``source`` says split, kind, format, template and subject."""

    text: str
    label: int
    kind: Kind
    source: str
    format: str = ""


@dataclass(frozen=True)
class NegativeSplit:
    """A concept's negatives, split into disjoint groups by position."""

    train: list[NegativeConcept]
    eval: list[NegativeConcept]
    centroid: list[NegativeConcept]

    @property
    def validation(self) -> list[NegativeConcept]:
        """The first half of the evaluation negatives: they only choose a threshold."""
        return self.eval[: len(self.eval) // 2]

    @property
    def test(self) -> list[NegativeConcept]:
        """The second half of the evaluation negatives: the held-out test negatives."""
        return self.eval[len(self.eval) // 2 :]


@dataclass(frozen=True)
class ProbeTemplate:
    """A probe template with its split-local id and surface format."""

    id: int
    format: str
    text: str


# ---------------------------------------------------------------------------
# Probe templates. Fields every subject has, whatever its part of speech: name, Name,
# lemma (the name when the subject has no lemmas) and gloss. Every template names the
# subject (name, Name or lemma), so a positive text always mentions its concept.
# No template word may be a concept word of the committed graph (checked by the tests).
# ---------------------------------------------------------------------------

PROBE_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {
        "question": (
            "What is {name}?",
            'What does the word "{lemma}" mean?',
            "Can you explain {name} to me?",
            "What is meant by {lemma}?",
        ),
        "definition": (
            "{Name}: {gloss}.",
            "Definition of {name}: {gloss}.",
            'The word "{lemma}" means {gloss}.',
            "{Name} (dictionary sense): {gloss}.",
        ),
        "statement": (
            "I would like to know more about {name}.",
            "The newspaper printed a short piece on {name}.",
            "A note about {name} was left on the desk.",
            "She wrote a long essay about {name}.",
        ),
        "context": (
            "Topic: {name}.",
            "Index entry: {name}, page 12.",
            "Chapter three: {Name}.",
            "Tags: {lemma}, reference, notes.",
        ),
    },
    "validation": {
        "question": (
            "How would you define {name}?",
            "Could you tell me what {lemma} means?",
            "Why do people talk about {name}?",
            "What do you know about {name}?",
            "Is there a simple way to describe {name}?",
            'Where does the word "{lemma}" come from?',
        ),
        "definition": (
            "In the dictionary, {name} is defined as: {gloss}.",
            'Meaning of "{lemma}": {gloss}.',
            "Glossary. {Name}: {gloss}.",
            'The term "{name}" refers to {gloss}.',
            "{Name} - {gloss}.",
            'Sense one of "{lemma}": {gloss}.',
        ),
        "statement": (
            "Our teacher spent the whole lesson on {name}.",
            "Everyone at the table had something to say about {name}.",
            "The documentary was entirely about {name}.",
            "He looked up {name} in an old reference book.",
            "The lecture covered {name} in detail.",
            "We had a long conversation about {name} last night.",
        ),
        "context": (
            "Subject: {name}",
            "See also: {name}.",
            "Section 4.2: {Name}",
            "Caption: {name}, photographed last spring.",
            "Related entry: {lemma}.",
            "Quiz round two: {name}.",
        ),
    },
    "test": {
        "question": (
            'What exactly is meant by the term "{name}"?',
            "Do you know what {lemma} means?",
            "How would a dictionary describe {name}?",
            "Could you give me an example of {name}?",
            'What comes to mind when you hear "{lemma}"?',
            "Have you ever read about {name}?",
        ),
        "definition": (
            'When people say "{lemma}", they mean {gloss}.',
            "A short definition of {name}: {gloss}.",
            'Lexicon entry "{name}": {gloss}.',
            'In simple terms, "{name}" means {gloss}.',
            "Dictionary: {lemma}. Meaning: {gloss}.",
            "My notes define {name} as {gloss}.",
        ),
        "statement": (
            "The museum opened a new exhibit on {name}.",
            "There is a chapter on {name} in this book.",
            "The article explained {name} clearly.",
            "The children were curious about {name}.",
            "The radio show discussed {name} this morning.",
            "She has been reading about {name} all week.",
        ),
        "context": (
            "Heading: {Name}",
            "Filed under: {name}.",
            "Item 7 on the list: {name}.",
            "Label on the folder: {lemma}.",
            "Next slide: {Name}.",
            "Bookmark: {name} (reference).",
        ),
    },
}

# The format axis: each TRAIN question template against a declarative rewrite of it with
# the same words, both filled with neutral-pool subjects. It measures whether a direction
# carries the question form of the very templates probes train on, with wording and
# length held nearly fixed. Why not other definitions (measured at layer 9 of the
# embedded model, mean |cos| of the first release's ten 1x1x1 probes vs a "floor", the
# mean |cos| of x_a - (x_b + x_c)/2 for three neutral texts of one template):
# * all TRAIN question templates minus all TRAIN statement templates: 0.56 vs floor 0.26,
#   since the two pools differ in length and wording, which any two texts differ in too;
# * generic minimal pairs ("Is it X?" / "It is X.", ...): 0.07 vs floor 0.16, an
#   interrogative-syntax direction that the first release's probes did not carry;
# * these rewrites: 0.33 vs floor 0.07.
FORMAT_AXIS_REWRITES: dict[str, str] = {
    "What is {name}?": "This is {name}.",
    'What does the word "{lemma}" mean?': 'The word "{lemma}" means something.',
    "Can you explain {name} to me?": "You can explain {name} to me.",
    "What is meant by {lemma}?": "Something is meant by {lemma}.",
}

# Concept-free neutral sentences and templates for the steering scale α only (Phase 5
# measures the median residual norm on them); no probe set uses them. They are the first
# release's evaluation neutrals, kept so that α, and with it every steering strength, is
# unchanged by the format-matched probe sets.
SCALE_NEUTRAL_SENTENCES: tuple[str, ...] = (
    "The bus stop on the corner was moved last year.",
    "A light breeze came in through the open window.",
    "The bakery sells out of bread by noon.",
    "The printer on the second floor is out of paper again.",
    "The concert was postponed because of the storm.",
    "The bridge is painted every ten years.",
    "Snow covered the hills by the end of the week.",
    "The report is due on Friday afternoon.",
    "The shop on the main street sells maps and postcards.",
    "The kettle clicked off just as the phone rang.",
    "The parking lot was nearly empty on Sunday.",
    "A new coat of paint made the hallway brighter.",
    "The package arrived two days earlier than expected.",
    "The river was calm under the old stone bridge.",
    "The elevator was out of service all afternoon.",
    "The soup needed a little more salt.",
    "The schedule for next month is posted by the door.",
    "The lamp in the study flickers when it rains.",
    "The tickets went on sale at nine in the morning.",
    "The gate at the end of the lane squeaks in the wind.",
)
SCALE_NEUTRAL_TEMPLATES: tuple[str, ...] = (
    "A link about {name} arrived in the inbox this morning.",
    "There was a quiz question about {name} on the radio.",
)
SCALE_TEXTS_PER_CONCEPT = 20

# ---------------------------------------------------------------------------
# Centroid templates. Fields: name, Name, a_name, A_name (with article), lemma (any lemma),
# other_lemma (a lemma other than the name), gloss, example, hypernym, a_hypernym, hyponym,
# a_hyponym. A template whose fields a subject lacks (no example...) is skipped for it.
# ---------------------------------------------------------------------------

CORE_TEMPLATES: dict[str, tuple[str, ...]] = {
    "n": (
        "{Name}: {gloss}.",
        "Define {name}. It is {gloss}.",
        "{A_name} is {gloss}.",
        "{Name}, also called {other_lemma}, is {gloss}.",
        "For example: {example}.",
        "The meaning of {name} is {gloss}.",
        "What is {name}? {A_name} is {gloss}.",
        "By definition, {a_name} is {gloss}.",
        "{A_name} is {a_hypernym}: {gloss}.",
        "{Name} refers to {gloss}.",
        "In short, {a_name} is {gloss}.",
    ),
    "v": (
        "{Name}: to {gloss}.",
        "Define {name}. It means to {gloss}.",
        "To {name} is to {gloss}.",
        "To {name}, also to {other_lemma}, is to {gloss}.",
        "For example: {example}.",
        "The meaning of {name} is to {gloss}.",
        "What does it mean to {name}? It means to {gloss}.",
        "By definition, to {name} is to {gloss}.",
        "To {name} is a way to {hypernym}: to {gloss}.",
        "{Name} refers to the act to {gloss}.",
        "In short, to {name} is to {gloss}.",
    ),
}

# Boundary (relational) phrasings per relation; {t} is the related synset's name.
_GENERIC_RELATION = ("{Name} is related to {t}.", "{Name} and {t} are connected.")
BOUNDARY_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "n": {
        "hypernyms": ("{Name} is a type of {t}.", "Every {name} is a kind of {t}."),
        "instance_hypernyms": ("{Name} is an instance of {t}.", "{Name} is one {t}."),
        "hyponyms": ("{T} is a type of {name}.", "{Name} includes {t}."),
        "instance_hyponyms": ("{T} is an instance of {name}.", "{Name} includes {t}."),
        "part_meronyms": ("{Name} has part {t}.", "{A_name} has {a_t} as a part."),
        "member_meronyms": ("{Name} has member {t}.", "{T} is a member of {name}."),
        "substance_meronyms": ("{Name} is made of {t}.", "{T} is a substance in {name}."),
        "part_holonyms": ("{Name} is part of {t}.", "{A_t} has {a_name} as a part."),
        "member_holonyms": ("{Name} is a member of {t}.", "{T} has member {name}."),
        "substance_holonyms": ("{Name} is a substance in {t}.", "{T} is made of {name}."),
        "attributes": ("{Name} is described by {t}.", "{T} is an attribute of {name}."),
        "antonyms": ("{Name} is the opposite of {t}.", "{T} is the opposite of {name}."),
        "topic_domains": ("{Name} belongs to the domain of {t}.", "{Name} is a term of {t}."),
        "in_topic_domains": ("{T} belongs to the domain of {name}.", "{T} is a term of {name}."),
        "region_domains": ("{Name} is used in {t}.", "{Name} is a term of {t}."),
        "usage_domains": ("{Name} is a {t} term.", "{Name} is labelled {t}."),
    },
    "v": {
        "hypernyms": ("To {name} is a way to {t}.", "To {name} is a kind of {t}."),
        "hyponyms": ("To {t} is a way to {name}.", "One way to {name} is to {t}."),
        "entailments": ("To {name} entails to {t}.", "If you {name}, you {t}."),
        "causes": ("To {name} causes to {t}.", "To {name} makes something {t}."),
        "verb_groups": ("To {name} is similar to {t}.", "{Name} and {t} are close in meaning."),
        "antonyms": ("To {name} is the opposite of to {t}.", "{T} is the opposite of {name}."),
        "topic_domains": ("{Name} belongs to the domain of {t}.", "{Name} is a term of {t}."),
        "region_domains": ("{Name} is used in {t}.", "{Name} is a term of {t}."),
        "usage_domains": ("{Name} is a {t} term.", "{Name} is labelled {t}."),
    },
}
# Relations tried first when picking boundary texts (the design's "type of", "has part",
# "related to"); the rest follow in ALL_RELATIONS order.
_BOUNDARY_PRIORITY = (
    "hypernyms",
    "instance_hypernyms",
    "part_meronyms",
    "member_meronyms",
    "part_holonyms",
    "member_holonyms",
    "substance_meronyms",
    "substance_holonyms",
    "entailments",
    "causes",
    "hyponyms",
    "instance_hyponyms",
)


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------


def article(word: str) -> str:
    """'a' or 'an' by the first letter (good enough for templated text); none for names."""
    if not word or word[0].isupper():
        return ""
    return "an " if word[0].lower() in "aeiou" else "a "


def capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def named_fields(key: str, word: str) -> dict[str, str]:
    """Fields ``key``, ``Key``, ``a_key`` and ``A_key``: the word, capitalised, with its article."""
    a_word = article(word) + word
    return {
        key: word,
        capitalised(key): capitalised(word),
        f"a_{key}": a_word,
        f"A_{key}": capitalised(a_word),
    }


def _strip_end(text: str) -> str:
    """Drop trailing spaces and final full stops; templates add their own punctuation."""
    return text.strip().rstrip(".").strip()


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _subject_fields(
    name: str,
    lemmas: Sequence[str],
    gloss: str,
    rng: random.Random,
    examples: Sequence[str] = (),
    hypernyms: Sequence[str] = (),
    hyponyms: Sequence[str] = (),
) -> dict[str, str]:
    """Template fields for one subject; optional fields are absent when the subject lacks them."""
    fields = {
        **named_fields("name", name),
        "lemma": rng.choice(list(lemmas)) if lemmas else name,
        "gloss": _strip_end(gloss),
    }
    others = [lemma for lemma in lemmas if lemma.lower() != name.lower()]
    if others:
        fields["other_lemma"] = rng.choice(others)
    if examples:
        fields["example"] = _strip_end(rng.choice(list(examples)))
    for key, words in (("hypernym", hypernyms), ("hyponym", hyponyms)):
        if words:
            fields[key] = rng.choice(list(words))
            fields[f"a_{key}"] = article(fields[key]) + fields[key]
    return fields


def _render(template: str, fields: Mapping[str, str]) -> str | None:
    """The filled template, or None when a field it needs is missing or empty."""
    if any(not fields.get(field) for field in _fields(template)):
        return None
    return template.format_map(fields)


def _related_names(concept: Concept, *relations: str) -> list[str]:
    return sorted({item.name for r in relations for item in concept.related.get(r, [])})


def _concept_fields(concept: Concept, rng: random.Random) -> dict[str, str]:
    return _subject_fields(
        concept.name,
        concept.lemmas,
        concept.gloss,
        rng,
        examples=concept.examples,
        hypernyms=_related_names(concept, "hypernyms", "instance_hypernyms"),
        hyponyms=_related_names(concept, "hyponyms", "instance_hyponyms"),
    )


def pos_key(concept: Concept) -> str:
    return "v" if concept.pos == "v" else "n"


# ---------------------------------------------------------------------------
# Splits
# ---------------------------------------------------------------------------


def split_negatives(concept: Concept) -> NegativeSplit:
    """Disjoint negatives for evaluation, centroids and training, by position.

    With 40 or more negatives (the default build): evaluation gets the first 20, the negative
    centroid the next 10 and probe training the rest (10 with 40). With fewer, evaluation gets
    half (at most 20), the centroid a quarter (at most 10) and training the rest; a group that
    would be empty borrows the training group's negatives (centroid) or raises (train, eval).
    The evaluation negatives are halved into validation and test negatives (properties).
    """
    negatives = list(concept.negatives)
    total = len(negatives)
    n_eval = min(EVAL_NEGATIVES, total // 2)
    n_centroid = min(CENTROID_NEGATIVES, total // 4)
    split = NegativeSplit(
        eval=negatives[:n_eval],
        centroid=negatives[n_eval : n_eval + n_centroid],
        train=negatives[n_eval + n_centroid :],
    )
    if not split.eval or not split.train:
        raise PromptError(
            f"{concept.synset} has {total} negatives; probe sets need at least 2 "
            "(build the graph with the default n_negatives=40)"
        )
    return split


def _neutral_halves(
    graph: ConceptGraph | None,
) -> tuple[list[NeutralItem], list[NeutralItem]]:
    """(train, eval) halves of the graph's neutral pool: the first half is for training."""
    pool = list(graph.neutral_pool) if graph is not None else []
    half = len(pool) // 2
    return pool[:half], pool[half:]


def _neutral_pool(graph: ConceptGraph | None, split: str) -> list[NeutralItem]:
    """The neutral subjects of a split: the training half, or a half of the evaluation half."""
    train, held = _neutral_halves(graph)
    if split == "train":
        return train
    half = len(held) // 2
    return held[:half] if split == "validation" else held[half:]


# ---------------------------------------------------------------------------
# Probe sets
# ---------------------------------------------------------------------------

Subject = tuple[str, Callable[[], dict[str, str]]]  # (synset id, fresh template fields)


def probe_templates(split: str) -> list[ProbeTemplate]:
    """A split's templates with ids (position in the split's table, formats in FORMATS order)."""
    if split not in SPLITS:
        raise PromptError(f"unknown probe split {split!r}; use one of {SPLITS}")
    texts = [(fmt, text) for fmt in FORMATS for text in PROBE_TEMPLATES[split][fmt]]
    return [ProbeTemplate(i, fmt, text) for i, (fmt, text) in enumerate(texts)]


def template_sequence(split: str, seed: int, key: str) -> list[ProbeTemplate]:
    """The seeded template order for one concept and split: formats cycle in a seeded order.

    Round ``r`` takes the ``r``-th (seeded) template of each format in the seeded format
    order, so any prefix whose length is a multiple of four holds every format equally
    often and a shorter prefix differs from equal by at most one per format.
    """
    rng = seeded_random(seed, "templates", split, key)
    formats = list(FORMATS)
    rng.shuffle(formats)
    pools: dict[str, list[ProbeTemplate]] = {f: [] for f in formats}
    for template in probe_templates(split):
        pools[template.format].append(template)
    for fmt in formats:
        rng.shuffle(pools[fmt])
    return [pools[fmt][r] for r in range(min(map(len, pools.values()))) for fmt in formats]


def max_train_texts() -> int:
    """The most texts per class a training set can hold: one per template of the train
    sequence (every concept's sequence has the same length; only the order is seeded)."""
    return len(template_sequence("train", 0, ""))


def _plain_fields(name: str, lemma: str, gloss: str) -> dict[str, str]:
    return {"name": name, "Name": capitalised(name), "lemma": lemma, "gloss": _strip_end(gloss)}


def _render_kind(
    split: str,
    sequence: Sequence[ProbeTemplate],
    kind: Kind,
    start: int,
    n: int,
    subjects: Sequence[Subject],
) -> list[ProbeExample]:
    """Texts ``start .. start+n-1`` of ``sequence``: text ``i`` is about subject ``i mod S``."""
    if n <= 0:
        return []
    if start + n > len(sequence):
        raise PromptError(
            f"{n} {split} {kind} texts asked, but the {split} template pool has "
            f"{len(sequence)} templates; ask for at most {len(sequence) - start}"
        )
    if not subjects:
        raise PromptError(f"no {split} {kind} subjects to build texts from")
    out = []
    for i in range(n):
        template = sequence[start + i]
        synset, make_fields = subjects[i % len(subjects)]
        source = f"{split}:{kind}:{template.format}:t{template.id:02d}:{synset}"
        text = template.text.format_map(make_fields())
        out.append(ProbeExample(text, LABELS[kind], kind, source, template.format))
    return out


def _positive_subjects(concept: Concept, split: str, seed: int) -> list[Subject]:
    rng = seeded_random(seed, "fields", split, concept.synset)

    def fields() -> dict[str, str]:
        lemma = rng.choice(list(concept.lemmas)) if concept.lemmas else concept.name
        return _plain_fields(concept.name, lemma, concept.gloss)

    return [(concept.synset, fields)]


def _negative_subjects(concept: Concept, split: str, seed: int) -> list[Subject]:
    groups = split_negatives(concept)
    negatives = list(getattr(groups, split))
    seeded_random(seed, "negatives", split, concept.synset).shuffle(negatives)
    rng = seeded_random(seed, "negative-fields", split, concept.synset)

    def maker(negative: NegativeConcept) -> Callable[[], dict[str, str]]:
        def fields() -> dict[str, str]:
            lemmas = list(negative.lemmas) or [negative.name]
            return _plain_fields(negative.name, rng.choice(lemmas), negative.gloss)

        return fields

    return [(negative.synset, maker(negative)) for negative in negatives]


def _neutral_subjects(
    concept: Concept, graph: ConceptGraph | None, split: str, seed: int
) -> list[Subject]:
    """Neutral-pool nouns whose name and gloss do not mention the concept, seeded order."""
    avoid = concept_words(concept.lemmas)
    items = [
        item
        for item in _neutral_pool(graph, split)
        if not mentions(f"{item.name} {item.gloss}", avoid)
    ]
    seeded_random(seed, "neutral", split, concept.synset).shuffle(items)
    return [
        (item.synset, partial(_plain_fields, item.name, item.name, item.gloss)) for item in items
    ]


def _check_sizes(**sizes: int) -> None:
    for label, value in sizes.items():
        if value < 0:
            raise PromptError(f"{label} must be >= 0, got {value}")


def probe_training_set(
    concept: Concept,
    graph: ConceptGraph | None,
    n_pos: int = 1,
    n_neg: int = 1,
    n_neutral: int = 1,
    seed: int = 0,
) -> list[ProbeExample]:
    """Format-matched probe training texts: positives, then negatives, then neutrals.

    The ``i``-th text of every class uses the ``i``-th template of the concept's seeded
    TRAIN sequence (:func:`template_sequence`), so at PxNxU with equal sizes the three
    classes have the same template multiset (at 1×1×1: one template, three subjects).
    Negatives are the concept's training negatives, neutrals the training half of the
    graph's neutral pool, both in seeded order. Labels: positive 1, negative and neutral 0.
    """
    _check_sizes(n_pos=n_pos, n_neg=n_neg, n_neutral=n_neutral)
    render = partial(_render_kind, "train", template_sequence("train", seed, concept.synset))
    return (
        render("positive", 0, n_pos, _positive_subjects(concept, "train", seed))
        + render("negative", 0, n_neg, _negative_subjects(concept, "train", seed))
        + render(
            "neutral",
            0,
            n_neutral,
            _neutral_subjects(concept, graph, "train", seed) if n_neutral else [],
        )
    )


def probe_eval_set(
    concept: Concept,
    graph: ConceptGraph | None,
    n_per_class: int = 20,
    seed: int = 0,
    split: str = "test",
) -> list[ProbeExample]:
    """A balanced held-out set: ``n_per_class`` positives and as many negatives.

    ``split`` is "test" (the held-out metrics) or "validation" (only for choosing a
    decision threshold); the two use disjoint templates, negatives and neutral subjects.
    The negative class is ``ceil(n/2)`` negative-concept texts on templates ``0..`` of the
    sequence and ``floor(n/2)`` neutral texts on the templates after them, so positives and
    negatives have exactly the same template multiset.
    """
    if split not in ("validation", "test"):
        raise PromptError(f"evaluation split must be 'validation' or 'test', got {split!r}")
    _check_sizes(n_per_class=n_per_class)
    sequence = template_sequence(split, seed, concept.synset)
    n_negative = (n_per_class + 1) // 2
    n_neutral = n_per_class - n_negative
    negatives = _negative_subjects(concept, split, seed)
    if n_negative and not negatives:
        raise PromptError(
            f"{concept.synset} has no {split} negatives (its {len(concept.negatives)} "
            "negatives leave fewer than 2 for evaluation); build the graph with the default "
            "n_negatives=40"
        )
    render = partial(_render_kind, split, sequence)
    return (
        render("positive", 0, n_per_class, _positive_subjects(concept, split, seed))
        + render("negative", 0, n_negative, negatives)
        + render(
            "neutral",
            n_negative,
            n_neutral,
            _neutral_subjects(concept, graph, split, seed) if n_neutral else [],
        )
    )


def format_axis_texts(graph: ConceptGraph | None) -> tuple[list[str], list[str]]:
    """Paired (questions, statements) about the training half of the neutral pool.

    Every training-half subject is rendered with each TRAIN question template and with its
    declarative rewrite (FORMAT_AXIS_REWRITES), template-major: text ``t * S + i`` is
    template ``t`` on subject ``i``. The mean difference of their activations is the
    "format axis" that the diagnostics and the ``classifier_deformat`` source use; the
    subjects are concept-free and the two sides share their words, so it is the form.
    """
    pool, _ = _neutral_halves(graph)
    if not pool:
        raise PromptError("the concept graph has no neutral pool to build the format axis from")
    questions, statements = [], []
    for question, statement in FORMAT_AXIS_REWRITES.items():
        for item in pool:
            fields = _plain_fields(item.name, item.name, item.gloss)
            questions.append(question.format_map(fields))
            statements.append(statement.format_map(fields))
    return questions, statements


def scale_neutral_texts(graph: ConceptGraph | None, seed: int) -> list[str]:
    """The neutral texts the steering scale α is measured on (sorted, unique).

    Per concept: the fixed scale sentences plus the evaluation half of the neutral pool in
    the scale templates, minus texts that mention the concept, seeded order, the first 20;
    the union over concepts. This is the first release's evaluation-neutral set, so α does
    not move with the probe sets.
    """
    _, pool = _neutral_halves(graph)
    texts: set[str] = set()
    for concept in graph.concepts if graph is not None else []:
        candidates = [(f"fixed{i:02d}", t) for i, t in enumerate(SCALE_NEUTRAL_SENTENCES)]
        candidates += [
            (
                item.synset,
                SCALE_NEUTRAL_TEMPLATES[i % len(SCALE_NEUTRAL_TEMPLATES)].format(name=item.name),
            )
            for i, item in enumerate(pool)
        ]
        seeded_random(seed, "neutral", "eval", concept.synset).shuffle(candidates)
        avoid = concept_words(concept.lemmas)
        texts.update([t for _, t in candidates if not mentions(t, avoid)][:SCALE_TEXTS_PER_CONCEPT])
    return sorted(texts)


def assert_disjoint(train: Sequence[ProbeExample], eval: Sequence[ProbeExample]) -> None:
    """Raise PromptError if any text (case-insensitive, stripped) is in both sets."""
    seen = {example.text.strip().lower() for example in train}
    shared = sorted({e.text for e in eval if e.text.strip().lower() in seen})
    if shared:
        raise PromptError(
            f"{len(shared)} probe texts are in both training and evaluation: {shared}"
        )


# ---------------------------------------------------------------------------
# Centroid texts
# ---------------------------------------------------------------------------


def _cycle_to(texts: list[str], n: int) -> list[str]:
    """Exactly ``n`` texts: truncate, or repeat the list in order when it is too short."""
    if not texts:
        raise PromptError("no texts to pad from")
    return [texts[i % len(texts)] for i in range(n)]


def _core_texts(concept: Concept, n: int, rng: random.Random) -> list[str]:
    out: list[str] = []
    templates = CORE_TEMPLATES[pos_key(concept)]
    for round_ in range(max(1, n)):
        for template in templates:
            fields = _concept_fields(concept, rng)
            if "example" in _fields(template) and concept.examples:
                fields["example"] = _strip_end(concept.examples[(round_) % len(concept.examples)])
            text = _render(template, fields)
            if text is not None and text not in out:
                out.append(text)
            if len(out) == n:
                return out
    return _cycle_to(out, n)


def _boundary_pairs(concept: Concept, rng: random.Random) -> list[tuple[str, str]]:
    """(relation, related name) pairs, round-robin over relations so that each kind appears."""
    relations = [r for r in _BOUNDARY_PRIORITY if concept.related.get(r)]
    relations += sorted(r for r in concept.related if r not in relations and concept.related[r])
    queues: dict[str, list[str]] = {}
    for relation in relations:
        names = sorted({item.name for item in concept.related[relation]} - {concept.name})
        rng.shuffle(names)
        queues[relation] = names
    pairs: list[tuple[str, str]] = []
    while any(queues.values()):
        for relation in relations:
            if queues[relation]:
                pairs.append((relation, queues[relation].pop()))
    return pairs


def _boundary_texts(concept: Concept, n: int, rng: random.Random) -> list[str]:
    phrasings = BOUNDARY_TEMPLATES[pos_key(concept)]
    pairs = _boundary_pairs(concept, rng)
    base = named_fields("name", concept.name)
    out: list[str] = []
    # Pass 0 uses each relation's first phrasing, pass 1 its second, pass 2 the generic ones.
    for variant in range(4):
        for relation, target in pairs:
            options = phrasings.get(relation, _GENERIC_RELATION)
            template = (options + _GENERIC_RELATION)[min(variant, len(options) + 1)]
            text = _render(template, {**base, **named_fields("t", target)})
            if text is not None and text not in out:
                out.append(text)
            if len(out) == n:
                return out
    if not out:  # no relations at all: fall back to synonyms
        out = [
            f"{capitalised(concept.name)} is also called {lemma}." for lemma in concept.lemmas[1:]
        ]
        out = out or [f"{capitalised(concept.name)} is related to other things."]
    return _cycle_to(out, n)


def _negative_texts(concept: Concept, n: int, rng: random.Random) -> list[str]:
    split = split_negatives(concept)
    negatives = list(split.centroid or split.train)
    rng.shuffle(negatives)
    out = [f"What is NOT {concept.name}?"]
    for variant in range(3):
        for negative in negatives:
            if len(out) == n:
                return out
            gloss = _strip_end(negative.gloss)
            a_neg = capitalised(article(negative.name) + negative.name)
            verb = concept.pos == "v"
            definition = f"To {negative.name} is to {gloss}." if verb else f"{a_neg} is {gloss}."
            text = (
                f"{capitalised(negative.name)}: {gloss}.",
                definition,
                f"The meaning of {negative.name} is {gloss}.",
            )[variant]
            if text not in out:
                out.append(text)
    return _cycle_to(out, n)[:n]


def centroid_texts(concept: Concept, n: int = 5, seed: int = 0) -> dict[str, list[str]]:
    """Texts for the three centroids, exactly ``n`` each: ``core``, ``boundary``, ``negative``.

    * core: definitions from the gloss, lemmas and WordNet examples ("{Name}: {gloss}.",
      "Define {name}. It is {gloss}.", "A {name} is {gloss}.", ...), never a generation prompt;
    * boundary: one text per relation in turn ("{Name} is a type of {hypernym}.", "{Name} has
      part {meronym}.", ...), related names chosen with ``seed``;
    * negative: "What is NOT {name}?" then definitions of the concept's centroid negatives
      (disjoint from probe training and evaluation negatives, see split_negatives).

    When a concept has too few relations, examples or negatives, other phrasings of the same
    facts are used first, and only then is the list repeated in order to reach ``n``.
    """
    if n < 1:
        raise PromptError(f"n must be at least 1, got {n}")
    makers = {"core": _core_texts, "boundary": _boundary_texts, "negative": _negative_texts}
    texts = {
        key: make(concept, n, seeded_random(seed, key, concept.synset))
        for key, make in makers.items()
    }
    forbidden = [p.lower() for p in render_generation_prompts(concept)] + [*_GENERATION_FRAGMENTS]
    for key, items in texts.items():
        for text in items:
            if any(p in text.lower() for p in forbidden):
                raise PromptError(f"{key} centroid text contains a generation prompt: {text!r}")
    return texts


# ---------------------------------------------------------------------------
# Generation prompts
# ---------------------------------------------------------------------------


def render_generation_prompts(
    concept: Concept | str, templates: Sequence[str] = GENERATION_PROMPTS
) -> list[str]:
    """The generation prompts with ``{concept}`` replaced by the concept's name."""
    name = concept if isinstance(concept, str) else concept.name
    return [template.replace("{concept}", name) for template in templates]
