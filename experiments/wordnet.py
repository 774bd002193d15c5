"""Building the concept graph from WordNet: top synsets, relations, distant negatives.

Used by ``steer-eval concepts`` only; every later phase loads the committed JSON with
:func:`experiments.concepts.load_concepts`. Relation lists from NLTK come back in an
order that can change from run to run, so every list is sorted and the build is
deterministic for a given seed and WordNet version.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from experiments.concepts import (
    ALL_RELATIONS,
    COUNTING_RULES,
    NEGATIVE_RULE,
    RULE_DESCRIPTIONS,
    SYNSET_RELATIONS,
    Concept,
    ConceptError,
    ConceptGraph,
    NegativeConcept,
    NeutralItem,
    RelatedSynset,
    clean_lemma,
    concept_words,
    mentions,
    seeded_random,
)

# Reports progress: (what, done, total). The command line draws it (rich); this module
# only counts, so the suite has one progress library and it stays in experiments/cli.
Progress = Callable[[str, int, int], None]


def _wordnet() -> Any:  # nltk has no type information
    """NLTK's WordNet reader, made to find the cached copy first (steering.assets)."""
    from steering.assets import use_wordnet

    use_wordnet()
    from nltk.corpus import wordnet

    return wordnet


def _synset(wn: Any, synset_id: str) -> Any:
    """The NLTK synset for an id such as 'dog.n.01', or a ConceptError that shows the format."""
    try:
        return wn.synset(synset_id)
    except Exception as exc:  # WordNetError or ValueError, depending on how the id is malformed
        hint = ""
        word = synset_id.split(".")[0] if synset_id else ""
        if word:
            try:
                candidates = sorted(s.name() for s in wn.synsets(word))[:5]
            except Exception:
                candidates = []
            if candidates:
                hint = f" (synsets for {word!r}: {', '.join(candidates)})"
        raise ConceptError(
            f"no WordNet synset {synset_id!r}; ids look like dog.n.01{hint}"
        ) from exc


def count_links(synset: Any, rule: str = "hatcat") -> int:
    """Number of relation links of a synset under a counting rule (see top_synsets)."""
    return sum(len(getattr(synset, relation)()) for relation in _rule_relations(rule))


def _rule_relations(rule: str) -> tuple[str, ...]:
    try:
        return COUNTING_RULES[rule]
    except KeyError:
        raise ConceptError(
            f"unknown counting rule {rule!r}; choose one of {sorted(COUNTING_RULES)}"
        ) from None


_RANKINGS: dict[tuple[tuple[str, ...], str], tuple[tuple[str, int], ...]] = {}


def _ranking(
    pos: tuple[str, ...], rule: str, progress: Progress | None
) -> tuple[tuple[str, int], ...]:
    """Every synset of ``pos`` with its link count, most first; cached per process (the
    cache is keyed without ``progress``, which only reports)."""
    cached = _RANKINGS.get((pos, rule))
    if cached is not None:
        return cached
    wn = _wordnet()
    _rule_relations(rule)  # an unknown rule fails before any counting
    rows: list[tuple[str, int]] = []
    for p in pos:
        for synset in _progress(list(wn.all_synsets(p)), f"counting links ({p})", progress):
            rows.append((synset.name(), count_links(synset, rule)))
    rows.sort(key=lambda row: (-row[1], row[0]))
    _RANKINGS[(pos, rule)] = tuple(rows)
    return _RANKINGS[(pos, rule)]


def top_synsets(
    n: int,
    pos: Sequence[str] = ("n", "v"),
    rule: str = "hatcat",
    progress: Progress | None = None,
) -> list[str]:
    """The ``n`` synsets of the given parts of speech with the most relation links.

    Rule ``"hatcat"`` (default) reproduces the original research's list exactly. It counts, per
    synset, the targets of its synset-level (semantic) pointers: hypernyms + hyponyms + part,
    substance and member meronyms + part, substance and member holonyms + similar_tos +
    attributes + entailments + causes (the rule of the original code's ``count_relationships``).
    Instance hypernyms/hyponyms, domains, also-sees, verb groups and all word-level (lemma)
    pointers are NOT counted. Ties are broken by synset id: animal_order.n.01 and
    arthropod_genus.n.01 both have 256 links, and the id order keeps animal_order.n.01 10th,
    as in the original (whose stable sort followed WordNet's file order).
    For nouns and verbs the top 10 is person.n.01, change.v.01, bird_genus.n.01,
    mammal_genus.n.01, herb.n.01, asterid_dicot_genus.n.01, shrub.n.01, rosid_dicot_genus.n.01,
    fish_genus.n.01, animal_order.n.01. Rule ``"all"`` counts every synset-level pointer.

    Counting all nouns and verbs takes some seconds; the ranking is cached per process.
    """
    if n < 1:
        raise ConceptError(f"n must be at least 1, got {n}")
    return [synset_id for synset_id, _ in _ranking(tuple(pos), rule, progress)[:n]]


def _related(wn: Any, synset: Any) -> dict[str, list[RelatedSynset]]:
    """Every relation of a synset, word-level pointers included, sorted and deduplicated."""
    own = synset.name()
    out: dict[str, list[RelatedSynset]] = {}
    for relation in ALL_RELATIONS:
        targets: dict[str, Any] = {}
        if relation in SYNSET_RELATIONS:
            for target in getattr(synset, relation)():
                targets[target.name()] = target
        for lemma in synset.lemmas():
            for target in getattr(lemma, relation, list)():  # a pointer lemmas may lack
                target_synset = target.synset() if hasattr(target, "synset") else target
                targets[target_synset.name()] = target_synset
        targets.pop(own, None)
        if targets:
            out[relation] = [
                RelatedSynset(
                    synset=name,
                    name=clean_lemma(targets[name].lemma_names()[0]),
                    lemmas=[clean_lemma(x) for x in targets[name].lemma_names()],
                )
                for name in sorted(targets)
            ]
    return out


_IDS_CACHE: dict[str, list[str]] = {}


def _candidate_ids(wn: Any, pos: str) -> list[str]:
    if pos not in _IDS_CACHE:
        _IDS_CACHE[pos] = sorted(s.name() for s in wn.all_synsets(pos))
    return _IDS_CACHE[pos]


def path_distance(a: Any, b: Any) -> int | None:
    """WordNet shortest-path distance over hypernym links, as used for negatives.

    Nouns share the root entity.n.01. Verbs have hundreds of separate trees, so for two verbs
    NLTK's simulated root joins them (as NLTK's own verb similarities do); without it, a root verb
    such as change.v.01 only reaches its own descendants, i.e. kinds of change, and every
    "negative" would really be a positive. Different parts of speech give None.
    """
    distance = a.shortest_path_distance(b, simulate_root=a.pos() == "v" and b.pos() == "v")
    return None if distance is None else int(distance)


@dataclass(frozen=True)
class _Exclusion:
    """Synsets that are the concept or its topic, whatever their path distance.

    ``exact``: the concept, its ancestors, descendants and directly related synsets, and the
    member-linked synsets (member meronyms/holonyms) of the concept and its descendants.
    ``below``: the same minus the ancestors; anything under one of these is excluded too.

    Why: a descendant can sit at distance >= 5 (a cardiologist is 5+ hypernym links below
    person) and still be an instance of the concept. And the taxonomic concepts (bird genus,
    herb, ...) reach their species only through member links, which shortest_path_distance
    ignores: a junco is 10+ hypernym links from bird_genus.n.01, but it is the topic of genus
    Junco, a bird genus.
    """

    exact: frozenset[str]
    below: frozenset[str]

    def excludes(self, candidate: Any) -> bool:
        if candidate.name() in self.exact:
            return True
        ancestors = candidate.closure(lambda s: s.hypernyms() + s.instance_hypernyms())
        return any(a.name() in self.below for a in ancestors)

    def __or__(self, other: _Exclusion) -> _Exclusion:
        return _Exclusion(self.exact | other.exact, self.below | other.below)


def _exclusion(synset: Any) -> _Exclusion:
    down = [synset, *synset.closure(lambda s: s.hyponyms() + s.instance_hyponyms())]
    up = synset.closure(lambda s: s.hypernyms() + s.instance_hypernyms())
    members = {m.name() for s in down for m in (*s.member_meronyms(), *s.member_holonyms())}
    below = {s.name() for s in down} | members
    exact = set(below) | {s.name() for s in up}
    for relation in SYNSET_RELATIONS:
        exact.update(s.name() for s in getattr(synset, relation)())
    return _Exclusion(frozenset(exact), frozenset(below))


class _CandidateDraw:
    """Distinct seeded random picks from ``ids``, skipping exact exclusions, until ``max_tries``
    indices have been drawn: the one sampling loop behind negatives and the neutral pool."""

    def __init__(
        self, wn: Any, ids: Sequence[str], rng: random.Random, exclusion: _Exclusion, max_tries: int
    ) -> None:
        self.wn, self.ids, self.rng, self.exclusion = wn, ids, rng, exclusion
        self.limit = min(max_tries, len(ids))
        self.tried: set[int] = set()

    def take(self, wanted: Callable[[], bool]) -> Iterator[Any]:
        """Yield candidate synsets while ``wanted()`` holds and tries remain."""
        while wanted() and len(self.tried) < self.limit:
            index = self.rng.randrange(len(self.ids))
            if index in self.tried:
                continue
            self.tried.add(index)
            if self.ids[index] in self.exclusion.exact:
                continue
            yield self.wn.synset(self.ids[index])


def _sample_negatives(
    wn: Any,
    synset: Any,
    n: int,
    min_distance: int,
    seed: int,
    max_tries: int,
) -> tuple[list[NegativeConcept], int]:
    """Random same-POS synsets at path_distance >= min_distance (None rejected).

    Also rejected: the concept's ancestors, descendants, directly related and member-linked
    synsets and anything below the latter (_Exclusion); so that a negative text never names
    the concept, candidates sharing a lemma with it or whose name or gloss mentions one of its
    concept_words; and candidates whose first lemma repeats an already chosen negative's (two
    identical "What is X?" texts).
    """
    pos = synset.pos()
    ids = _candidate_ids(wn, "a" if pos == "s" else pos)
    rng = seeded_random(seed, "negatives", synset.name())
    own_lemmas = {clean_lemma(x).lower() for x in synset.lemma_names()}
    avoid = concept_words(synset.lemma_names())
    exclusion = _exclusion(synset)
    chosen: list[NegativeConcept] = []
    names: set[str] = set()
    draw = _CandidateDraw(wn, ids, rng, exclusion, max_tries)
    for candidate in draw.take(lambda: len(chosen) < n):
        if candidate.pos() != pos:
            continue
        lemmas = [clean_lemma(x) for x in candidate.lemma_names()]
        name = lemmas[0]
        if name.lower() in names or own_lemmas & {x.lower() for x in lemmas}:
            continue
        if mentions(f"{name} {candidate.definition()}", avoid):
            continue
        distance = path_distance(synset, candidate)
        if distance is None or distance < min_distance or exclusion.excludes(candidate):
            continue
        names.add(name.lower())
        chosen.append(
            NegativeConcept(
                synset=candidate.name(),
                name=name,
                lemmas=lemmas,
                gloss=candidate.definition(),
                distance=distance,
            )
        )
    return chosen, len(draw.tried)


def _sample_neutral(
    wn: Any,
    concepts: Sequence[Any],
    n: int,
    min_distance: int,
    seed: int,
    max_tries: int,
) -> list[NeutralItem]:
    """Nouns far from every concept: distance >= min_distance, or None (another POS).

    Nouns only, so that neutral sentence templates stay grammatical. Items in a concept's
    topic (see _Exclusion) or that mention any concept's concept_words are skipped.
    """
    ids = _candidate_ids(wn, "n")
    rng = seeded_random(seed, "neutral", *[c.name() for c in concepts])
    all_lemmas = {clean_lemma(x).lower() for c in concepts for x in c.lemma_names()}
    avoid = set().union(*(concept_words(c.lemma_names()) for c in concepts))
    exclusion = _Exclusion(frozenset(), frozenset())
    for concept in concepts:
        exclusion = exclusion | _exclusion(concept)
    chosen: list[NeutralItem] = []
    names: set[str] = set()
    draw = _CandidateDraw(wn, ids, rng, exclusion, max_tries)
    for candidate in draw.take(lambda: len(chosen) < n):
        name = clean_lemma(candidate.lemma_names()[0])
        lemmas = {clean_lemma(x).lower() for x in candidate.lemma_names()}
        if name.lower() in names or lemmas & all_lemmas:
            continue
        if mentions(f"{name} {candidate.definition()}", avoid):
            continue
        distances = [path_distance(concept, candidate) for concept in concepts]
        if any(d is not None and d < min_distance for d in distances):
            continue
        if exclusion.excludes(candidate):
            continue
        names.add(name.lower())
        chosen.append(NeutralItem(synset=candidate.name(), name=name, gloss=candidate.definition()))
    if len(chosen) < n:
        raise ConceptError(
            f"found only {len(chosen)} of {n} neutral synsets at distance >= {min_distance} "
            f"from every concept after {len(draw.tried)} candidates; "
            "lower n_neutral or min_distance"
        )
    return chosen


def _progress(items: Sequence[Any], description: str, report: Progress | None) -> Iterable[Any]:
    if not report:
        yield from items
        return
    for done, item in enumerate(items):
        report(description, done, len(items))
        yield item
    report(description, len(items), len(items))


def build_concept(
    synset_id: str,
    seed: int = 0,
    n_negatives: int = 40,
    min_distance: int = 5,
    rule: str = "hatcat",
    max_tries: int | None = None,
) -> Concept:
    """One concept from WordNet, with its seeded negatives (see build_concept_graph)."""
    wn = _wordnet()
    synset = _synset(wn, synset_id)
    if max_tries is None:
        max_tries = max(20000, 200 * n_negatives)
    negatives, tries = _sample_negatives(wn, synset, n_negatives, min_distance, seed, max_tries)
    if len(negatives) < n_negatives:
        raise ConceptError(
            f"{synset.name()}: found only {len(negatives)} of {n_negatives} negatives of the same "
            f"part of speech at path_distance >= {min_distance} after {tries} random "
            "candidates; lower min_distance or n_negatives"
        )
    lemmas = [clean_lemma(x) for x in synset.lemma_names()]
    return Concept(
        synset=synset.name(),
        name=lemmas[0],
        pos=synset.pos(),
        lemmas=lemmas,
        gloss=synset.definition(),
        examples=list(synset.examples()),
        n_links=count_links(synset, rule),
        related=_related(wn, synset),
        negatives=negatives,
    )


def build_concept_graph(
    synsets: Sequence[str] | None = None,
    top_n: int = 10,
    seed: int = 0,
    n_negatives: int = 40,
    min_distance: int = 5,
    n_neutral: int = 60,
    progress: Progress | None = None,
    rule: str = "hatcat",
    max_tries: int | None = None,
) -> ConceptGraph:
    """Build a concept graph from WordNet: explicit synsets, or the ``top_n`` by link count.

    ``n_negatives`` defaults to 40 so that probe training (10), probe evaluation (20, disjoint)
    and the negative centroid (10) each get their own negatives (experiments.prompts).
    Negatives and the neutral pool are drawn with RNGs seeded from ``seed`` and the synset ids,
    so a concept's negatives do not depend on which other concepts are in the graph.
    ``max_tries`` caps the random candidates examined per concept (default 20,000, which covers
    all verbs) before a ConceptError says there are too few.
    """
    if n_negatives < 1 or n_neutral < 0 or min_distance < 1:
        raise ConceptError(
            "n_negatives and min_distance must be at least 1 and n_neutral at least 0 "
            f"(got {n_negatives}, {min_distance}, {n_neutral})"
        )
    wn = _wordnet()
    if synsets is None:
        ids = top_synsets(top_n, rule=rule, progress=progress)
        selection = (
            f"top {top_n} noun/verb synsets by link count ({rule}: {RULE_DESCRIPTIONS[rule]})"
        )
    else:
        ids = [_synset(wn, s).name() for s in synsets]
        if len(set(ids)) != len(ids):
            raise ConceptError(f"duplicate synsets in {list(synsets)}")
        if not ids:
            raise ConceptError("no synsets given")
        selection = "explicit list"
    concepts = [
        build_concept(
            s,
            seed=seed,
            n_negatives=n_negatives,
            min_distance=min_distance,
            rule=rule,
            max_tries=max_tries,
        )
        for s in _progress(ids, "sampling negatives", progress)
    ]
    neutral = _sample_neutral(
        wn,
        [wn.synset(s) for s in ids],
        n_neutral,
        min_distance,
        seed,
        max_tries=max_tries or max(20000, 200 * n_neutral),
    )
    return ConceptGraph(
        wordnet_version=str(wn.get_version()),
        selection_rule=selection,
        seed=seed,
        min_distance=min_distance,
        n_negatives=n_negatives,
        negative_rule=NEGATIVE_RULE,
        concepts=concepts,
        neutral_pool=neutral,
    )
