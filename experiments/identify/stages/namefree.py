"""Name-free texts (identify v3): detection and outcome without the concept's name.

Every probe test positive and every on-concept likelihood text names its concept, so a
direction that reads the *name* both detects and steers through one lexical channel.
Here the concept appears only through what falls under it (hyponyms, instances, members;
the parts of a place), never through its lemmas or their derived forms:

* the concept's related names are split, seeded, into two disjoint halves: one fills the
  name-free **test positives** (scored against the usual test negatives), the other the
  name-free **likelihood texts**, so the two outcomes share no word either;
* the likelihood texts are paired with another concept's name-free text from the same
  frame, length-matched, that mentions neither A's words nor any of A's related names
  (as ``likelihood_texts`` pairs the named ones);
* the frames are not the named pools' frames, and no frame word is a concept word.

v3 (issue 53): v2's texts read badly ("reading about anteroom", "decided to caw the
whole thing") and moved the shortcut to Latin names, so each name is looked up in
WordNet (:func:`name_info`) and the texts are made to read as English:

* a noun gets a determiner and number by :func:`noun_forms` (count nouns plural or
  "a"/"an", mass, proper and plural-only nouns bare);
* a verb only fills frames its WordNet verb frames allow (:data:`VERB_KINDS`);
* an obscure or abstract name gets a short description from its gloss, when the gloss
  names neither the concept nor any other of its related names;
* taxonomic names (binomials, "-aceae", anything under ``taxonomic_group.n.01``) and
  names whose most frequent sense lies outside the concept are not used;
* :func:`drop_worst` keeps a seeded fraction of texts the model finds most probable
  (``identify.name_free_keep``; the study scores them with the unsteered model).

A concept with fewer than two usable names in a half gets no name-free texts (NaN in
its rows, said in the record), rather than texts that would name it; taxonomic concepts
(genera, families) now usually do.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from experiments.concepts import Concept, ConceptGraph, concept_words, mentions
from experiments.identify.stages.english import indefinite, plural
from experiments.likelihood_texts import LikelihoodTexts, pick_off

NAME_RELATIONS = ("hyponyms", "instance_hyponyms", "member_meronyms", "part_meronyms")
DERIVED = ("derivationally_related_forms",)

# Scores texts: each text's mean per-token negative log-likelihood (lower reads better).
Scorer = Callable[[Sequence[str]], Sequence[float]]

# Verb frame kinds, by the WordNet verb frame ids (nltk ``Lemma.frame_ids``) that allow
# them: "it" (Somebody ----s something), "them" (Somebody ----s somebody), "who"
# (Somebody ----s), "what" (Something ----s).
VERB_KINDS: dict[str, frozenset[int]] = {
    "it": frozenset({8, 11, 15, 16, 19, 21, 31}),
    "them": frozenset({9, 10, 14, 17, 18, 20, 24, 25, 30}),
    "who": frozenset({2, 13, 22, 27}),
    "what": frozenset({1, 4, 12}),
}

# Noun fields: {x} the topic form (count nouns plural), {a} the one-of form ("a ballroom");
# {y} a second name (topic form). Verb frames are (kind, text) with {x} the bare verb.
LIKELIHOOD_FRAMES: dict[str, tuple[str, ...]] = {
    "n": (
        "We spent the whole afternoon reading about {x}.",
        "My aunt knew a surprising amount about {x} and {y}.",
        "The little book had a chapter on {x}.",
        "There is more to {x} than most people expect.",
        "She kept coming back to {x} in her notes.",
        "The guide talked about {x} for almost an hour.",
        "He wrote a short poem about {a}.",
        "They argued about {x} until the train arrived.",
        "A short film about {x} was shown that evening.",
        "Nobody at dinner had heard of {a} before.",
        "The radio host asked listeners about {x}.",
        "The second lesson was mostly about {x}.",
    ),
}
LIKELIHOOD_VERB_FRAMES: tuple[tuple[str, str], ...] = (
    ("it", "They had to {x} it before the guests arrived."),
    ("who", "She decided to {x} again after lunch."),
    ("them", "It took him an hour to {x} them properly."),
    ("what", "We heard something {x} outside the window."),
    ("it", "Nobody wanted to {x} it on a Sunday."),
    ("who", "The children tried to {x} on their own."),
    ("them", "I saw her {x} them twice last week."),
    ("what", "It began to {x} just after dawn."),
    ("it", "He promised to {x} it by the end of the day."),
    ("who", "They will {x} again tomorrow morning."),
    ("it", "It is easier to {x} it than to {y} it."),
    ("who", "My neighbour likes to {x} in the garden."),
)
TEST_FRAMES: dict[str, tuple[str, ...]] = {
    "n": (
        "A note about {x} was left on the kitchen table.",
        "Topic of the day: {x}.",
        "The article described {a} in some detail.",
        "A friend asked me about {x} after dinner.",
        "The exhibit included a section on {x}.",
        "She told me a story about {a}.",
        "The quiz had a question about {x}.",
        "Our teacher mentioned {x} twice today.",
        "I read a long piece about {x} yesterday.",
        "The lecture ended with a slide on {x}.",
    ),
}
TEST_VERB_FRAMES: tuple[tuple[str, str], ...] = (
    ("it", "I watched my uncle {x} it yesterday."),
    ("who", "They plan to {x} next week."),
    ("them", "Did you {x} them already?"),
    ("what", "We heard it {x} in the night."),
    ("it", "She taught me how to {x} it."),
    ("who", "We had to {x} in a hurry."),
    ("them", "He likes to {x} them in the morning."),
    ("what", "Something began to {x} in the distance."),
    ("it", "Nobody knew how to {x} it."),
    ("who", "They stopped to {x} on the way."),
)
# The pool a frame id names: noun frames "n03", verb frames "v03" (as the named texts').
VERB_FRAMES = {"likelihood": LIKELIHOOD_VERB_FRAMES, "test": TEST_VERB_FRAMES}

# Lexicographer files whose nouns read as mass or abstract (bare: "about humor").
MASS_FILES = frozenset(
    {
        "noun.substance", "noun.food", "noun.attribute", "noun.state", "noun.feeling",
        "noun.cognition", "noun.act", "noun.process", "noun.phenomenon",
        "noun.communication", "noun.relation", "noun.motive",
    }
)  # fmt: skip
ABSTRACT_FILES = MASS_FILES - {"noun.substance", "noun.food"}
# Capitalised words with a taxonomic rank's ending (Rosaceae, Felidae, Rosales, ...).
TAXON = re.compile(
    r"\b[A-Z][a-z]{2,}(aceae|idae|ales|formes|inae|oidea|ineae|phyta|opsida|mycetes|mycota)\b"
)
BINOMIAL = re.compile(r"^[A-Z][a-z]+ [a-z]+$")
GLOSS_WORDS = 12  # a longer gloss is not a short description; the name goes bare


@dataclass(frozen=True)
class NameInfo:
    """What a text needs to know about one related name (from its WordNet synset).

    ``noun``: "count", "mass", "proper" or "plural" (a plural-only noun: "tongs");
    ``verb``: the :data:`VERB_KINDS` the verb takes; ``gloss``: a short description for
    an obscure or abstract name, or None; ``usable``: False for a taxonomic name or one
    whose most frequent sense lies outside the concept.
    """

    noun: str = "mass"
    verb: frozenset[str] = frozenset({"it"})
    gloss: str | None = None
    usable: bool = True


@cache
def _wordnet() -> Any:
    from experiments.wordnet import _wordnet as reader

    return reader()


@cache
def _tag_counts() -> dict[str, int]:
    """SemCor tag count by sense key (WordNet's cntlist.rev), read once: nltk's
    ``Lemma.count`` searches the file on every call."""
    with _wordnet().open("cntlist.rev") as f:
        rows = (line.split() for line in f)
        return {row[0]: int(row[-1]) for row in rows if len(row) == 3}


def _count(lemma: Any) -> int:
    return _tag_counts().get(lemma.key(), 0)


@cache
def _synset(synset_id: str) -> Any:
    """The WordNet synset, or None (an own concept's related name has none)."""
    try:
        return _wordnet().synset(synset_id)
    except Exception:
        return None


@cache
def _ancestors(synset_id: str) -> frozenset[str]:
    """Every synset above ``synset_id`` (hypernyms and instance hypernyms), itself too."""
    synset = _synset(synset_id)
    if synset is None:
        return frozenset({synset_id})
    up = synset.closure(lambda s: s.hypernyms() + s.instance_hypernyms())
    return frozenset({synset_id, *(s.name() for s in up)})


def taxonomic(name: str, synset_id: str) -> bool:
    """A Latin binomial, a name with a rank's ending, or a taxonomic group in WordNet."""
    return bool(
        BINOMIAL.match(name)
        or TAXON.search(name)
        or "taxonomic_group.n.01" in _ancestors(synset_id)
    )


def most_frequent_sense_fits(name: str, synset_id: str, concept_synset: str) -> bool:
    """Whether the name's most frequent WordNet sense (any part of speech, by SemCor
    count, WordNet's own order on ties) is this synset or falls under the concept, so
    that "office" (a place, first) is not read as a state."""
    wn = _wordnet()
    word = name.replace(" ", "_")
    senses = wn.synsets(word)
    if len(senses) <= 1:
        return True

    def count(s: Any) -> int:
        return sum(_count(lm) for lm in s.lemmas() if lm.name().lower() == word.lower())

    best = max(enumerate(senses), key=lambda p: (count(p[1]), -p[0]))[1]
    return best.name() == synset_id or concept_synset in _ancestors(best.name())


def _short_gloss(synset: Any, avoid: set[str]) -> str | None:
    gloss = re.sub(r"\s*\([^)]*\)", "", synset.definition().split(";")[0]).strip()
    if not gloss or len(gloss.split()) > GLOSS_WORDS or mentions(gloss, avoid):
        return None
    if TAXON.search(gloss) or re.search(r"\b(genus|family|order|species)\b", gloss):
        return None  # a gloss such as "plants of the genus Scutellaria" names the taxon
    return gloss


def name_info(name: str, synset_id: str, concept: Concept, avoid: set[str]) -> NameInfo:
    """Look one related name up in WordNet (see :class:`NameInfo`); ``avoid`` are the
    words its gloss must not mention. A name without a synset is a bare, usable noun
    (or a verb that takes an object), as in v2."""
    synset = _synset(synset_id)
    if synset is None:
        return NameInfo()
    if taxonomic(name, synset_id) or not most_frequent_sense_fits(name, synset_id, concept.synset):
        return NameInfo(usable=False)
    wn = _wordnet()
    word = name.replace(" ", "_")
    if synset.pos() == "v":
        ids = {
            i for lm in synset.lemmas() if lm.name().lower() == word.lower() for i in lm.frame_ids()
        }
        ids = ids or set(synset.frame_ids())
        kinds = {k for k, allowed in VERB_KINDS.items() if ids & allowed}
        if " " in name:  # "move up it" does not read: a phrasal verb takes no object here
            kinds -= {"it", "them"}
        return NameInfo(verb=frozenset(kinds), usable=bool(kinds))
    lexname = synset.lexname()
    last = name.split()[-1].lower()
    senses = wn.synsets(word, "n")
    if name[:1].isupper():
        noun = "proper"
    elif re.search(r"[^su]s$", last) and wn.synsets(last[:-1], "n"):  # "tongs", "silks"
        noun = "plural"
    elif (
        lexname in MASS_FILES
        or re.search(r"(ness|ity|ism|ing)$", last)
        # a plant or animal also eaten or used as a stuff reads as one ("coriander")
        or any(s.lexname() in ("noun.food", "noun.substance") for s in senses)
    ):
        noun = "mass"
    else:
        noun = "count"
    obscure = not any(_count(lm) for s in senses for lm in s.lemmas() if lm.name() == word)
    gloss = _short_gloss(synset, avoid) if obscure or lexname in ABSTRACT_FILES else None
    return NameInfo(noun=noun, gloss=gloss)


def noun_forms(name: str, info: NameInfo, describe: bool = True) -> tuple[str, str]:
    """(topic form, one-of form) of a noun: "ballrooms" and "a ballroom" for a count
    noun, the bare name for a mass, proper or plural-only one; with a description, both
    are the one-of form followed by the gloss ("an anteroom, a large entrance area")."""
    if info.noun == "count":
        topic, one = plural(name), indefinite(name)
    else:
        topic = one = name
    if describe and info.gloss:
        topic = one = f"{one}, {info.gloss},"
    return topic, one


def _render(frame: str, x: str, info: NameInfo, y: str | None, y_info: NameInfo | None) -> str:
    x_topic, x_one = noun_forms(x, info, describe="{y}" not in frame)  # one description
    y_topic = noun_forms(y, y_info or NameInfo(), describe=False)[0] if y else ""
    text = frame.format(x=x_topic, a=x_one, y=y_topic)
    return re.sub(r",([.:;?!])", r"\1", text)  # a description closes at the sentence's end


# ------------------------------------------------------------------ names and texts


def avoided_words(concept: Concept) -> set[str]:
    """The concept's words and those of its derived forms ("African" for Africa)."""
    derived = [item.name for r in DERIVED for item in concept.related.get(r, [])]
    return concept_words([*concept.lemmas, concept.name, *derived])


def _related(concept: Concept) -> dict[str, str]:
    """Related name → its synset (the first in relation order when two share a name)."""
    out: dict[str, str] = {}
    for r in NAME_RELATIONS:
        for item in concept.related.get(r, []):
            out.setdefault(item.name, item.synset)
    out.pop(concept.name, None)
    return out


_INFO_CACHE: dict[tuple[str, str], NameInfo] = {}


def name_infos(concept: Concept) -> dict[str, NameInfo]:
    """Every related name that may fill a text, with what the text needs to know."""
    avoid = avoided_words(concept)
    related = _related(concept)
    # a one-letter name ("A" under letter) would read as a word of any sentence;
    # ``mentions`` reads "Ile-de-France" as one word, but it names France
    names = [n for n in related if len(n) > 1 and not mentions(n.replace("-", " "), avoid)]
    gloss_avoid = avoid | concept_words(list(related))
    out = {}
    for name in sorted(names):
        key = (concept.synset, name)
        if key not in _INFO_CACHE:
            _INFO_CACHE[key] = name_info(name, related[name], concept, gloss_avoid)
        if _INFO_CACHE[key].usable:
            out[name] = _INFO_CACHE[key]
    return out


def name_halves(concept: Concept, seed: int) -> tuple[list[str], list[str]]:
    """(test names, likelihood names): the usable related names, split seeded in two."""
    names = sorted(name_infos(concept))
    random.Random(f"{seed}|name-free|{concept.synset}").shuffle(names)
    half = len(names) // 2
    return names[:half], names[half:]


def _frames(concept: Concept, which: str) -> list[tuple[str, str]]:
    """(kind, frame) of the concept's pool: nouns' kind is "n"."""
    if concept.pos == "v":
        return list(VERB_FRAMES[which])
    nouns = (LIKELIHOOD_FRAMES if which == "likelihood" else TEST_FRAMES)["n"]
    return [("n", f) for f in nouns]


def _fill(
    frames: Sequence[tuple[str, str]],
    infos: Mapping[str, NameInfo],
    names: list[str],
    n: int,
    rng: random.Random,
    pos: str = "n",
) -> list[tuple[str, str]]:
    """(frame id, text) for up to ``n`` frames, names drawn without replacement first
    among those that fit the frame (a verb's kinds); a frame no name fits is skipped.
    The id is the pool and the frame's position (``n03``), as the named texts' are."""
    if len(names) < 2:
        return []
    out: list[tuple[str, str]] = []
    pool: list[str] = []

    def draw(kind: str, other: str | None = None) -> str | None:
        nonlocal pool
        fits = [m for m in names if m != other and (kind == "n" or kind in infos[m].verb)]
        if not fits:
            return None
        if not any(m in fits for m in pool):
            pool = rng.sample(names, len(names))
        pick = next(m for m in reversed(pool) if m in fits)
        pool.remove(pick)
        return pick

    for i, (kind, frame) in enumerate(frames):
        if len(out) == n:
            break
        x = draw(kind)
        y = draw(kind, other=x) if x is not None and "{y}" in frame else None
        if x is None or ("{y}" in frame and y is None):
            continue
        if pos == "v":
            text = frame.format(x=x, y=y or "")
        else:
            text = _render(frame, x, infos[x], y, infos[y] if y else None)
        if any(text == t for _, t in out):
            continue
        out.append((f"{pos}{i % len(set(frames)):02d}", text))
    return out


def candidates_needed(n: int, keep: float) -> int:
    """How many texts to draw so that ``n`` remain after :func:`drop_worst` at ``keep``."""
    return n if keep >= 1 else math.ceil(n / keep)


def drop_worst(texts: Sequence[str], scorer: Scorer, keep: float) -> list[str]:
    """``texts`` less the ones the model reads worst: the ``ceil(keep · len)`` with the
    lowest per-token NLL (``scorer``; earlier text first on ties) stay, in their order.
    ``keep`` 1 scores nothing."""
    if keep >= 1 or not texts:
        return list(texts)
    if keep <= 0:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    nll = [float(v) for v in scorer(list(texts))]
    if len(nll) != len(texts):
        raise ValueError(f"the scorer gave {len(nll)} values for {len(texts)} texts")
    ranked = sorted(
        range(len(texts)), key=lambda i: (math.inf if math.isnan(nll[i]) else nll[i], i)
    )
    kept = set(ranked[: math.ceil(keep * len(texts))])
    return [t for i, t in enumerate(texts) if i in kept]


def drop_worst_each(
    groups: Mapping[str, Sequence[str]], scorer: Scorer, keep: float, n: int
) -> dict[str, list[str]]:
    """:func:`drop_worst` within each group (a concept's texts are ranked against each
    other, so a concept with rare names is not dropped whole), scored in one call; the
    first ``n`` kept of each group."""
    if keep >= 1:
        return {k: list(v)[:n] for k, v in groups.items()}
    every = list(dict.fromkeys(t for texts in groups.values() for t in texts))
    scores = dict(zip(every, scorer(every), strict=True)) if every else {}
    return {
        k: drop_worst(texts, lambda ts: [scores[t] for t in ts], keep)[:n]
        for k, texts in groups.items()
    }


def name_free_positives(concept: Concept, n: int, seed: int, keep: float = 1.0) -> list[str]:
    """Up to ``n`` test positives that name only what falls under the concept (up to
    ``candidates_needed(n, keep)`` of them, for :func:`drop_worst_each` to cut to ``n``)."""
    names, _ = name_halves(concept, seed)
    infos = name_infos(concept)
    rng = random.Random(f"{seed}|name-free-test|{concept.synset}")
    m = candidates_needed(n, keep)
    frames = _frames(concept, "test")
    pos = "v" if concept.pos == "v" else "n"
    # cycled, as a verb with no object-taking name skips the frames with an object
    return [t for _, t in _fill(frames * (1 + 2 * m), infos, names, m, rng, pos)]


def name_free_likelihood_texts(
    graph: ConceptGraph,
    concepts: Sequence[str],
    n: int,
    seed: int,
    length: Callable[[str], int] | None = None,
    scorer: Scorer | None = None,
    keep: float = 1.0,
) -> LikelihoodTexts:
    """Name-free on-concept texts for ``concepts`` and their paired off-concept texts,
    drawn from every concept of ``graph`` (see the module docstring); with a ``scorer``
    and ``keep`` < 1, each concept's worst texts are dropped first (:func:`drop_worst`)."""
    length = length or (lambda text: len(text.split()))
    m = candidates_needed(n, keep) if scorer is not None else n
    pool: dict[str, list[tuple[str, str]]] = {}
    for concept in graph.concepts:
        _, names = name_halves(concept, seed)
        rng = random.Random(f"{seed}|name-free-likelihood|{concept.synset}")
        pos = "v" if concept.pos == "v" else "n"
        frames = _frames(concept, "likelihood")
        # the frames again after the first round: for ``keep`` < 1, or a verb whose names
        # skip some frames (a repeated frame id pairs as the first)
        pool[concept.synset] = _fill(frames * (1 + 2 * m), name_infos(concept), names, m, rng, pos)
    if scorer is not None and keep < 1:
        kept = drop_worst_each({c: [t for _, t in p] for c, p in pool.items()}, scorer, keep, n)
        pool = {c: [(i, t) for i, t in p if t in set(kept[c])] for c, p in pool.items()}
    on, off, sources = {}, {}, {}
    for synset in concepts:
        concept = graph.get(synset)
        if len(pool[synset]) < 2:
            continue
        related = {n for half in name_halves(concept, seed) for n in half}
        rng = random.Random(f"{seed}|name-free-off|{synset}")
        on[synset] = [t for _, t in pool[synset]]
        # a verb's text pairs with a verb's: pick_off falls back to any frame when no
        # text of the same frame is left, and a verb's names fill only some frames
        same = {c: p for c, p in pool.items() if (graph.get(c).pos == "v") == (concept.pos == "v")}
        off[synset], sources[synset] = pick_off(
            concept, pool[synset], same, length, rng, avoid=avoided_words(concept) | related
        )
    return LikelihoodTexts(on, off, sources, seed)
