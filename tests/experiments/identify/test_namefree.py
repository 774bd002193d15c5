"""Name-free texts: no test positive and no on-concept likelihood text names its concept,
the two share no related name, and the off-concept partner mentions neither."""

from __future__ import annotations

import collections
import itertools
import math
import random
import re
import string
from pathlib import Path

import pytest

from experiments.concepts import Concept, ConceptGraph, concept_words, load_concepts, mentions
from experiments.identify.stages.namefree import (
    LIKELIHOOD_FRAMES,
    LIKELIHOOD_VERB_FRAMES,
    NAME_RELATIONS,
    TAXON,
    TEST_FRAMES,
    TEST_VERB_FRAMES,
    VERB_KINDS,
    NameInfo,
    _fill,
    avoided_words,
    drop_worst,
    drop_worst_each,
    indefinite,
    name_free_likelihood_texts,
    name_free_positives,
    name_halves,
    name_infos,
    plural,
    taxonomic,
)
from experiments.wordnet import _wordnet as wordnet

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


# ---------------------------------------------------------------- v3: texts read as English

SAMPLED = {  # nouns of every kind (artifact, person, plant, state, place) and verbs
    "wordnet_top50.json": ["herb.n.01", "device.n.01", "quality.n.01", "travel.v.01"],
    "wordnet_51to100.json": [
        "room.n.01", "state.n.02", "garment.n.01", "worker.n.01", "france.n.01",
        "utter.v.02", "fasten.v.01", "cover.v.01",
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def sampled(graphs) -> list[tuple[Concept, list[str], list[str]]]:
    """(concept, test positives, likelihood texts) of the sampled concepts, seed 0."""
    by_file = dict(zip(("wordnet_top50.json", "wordnet_51to100.json"), graphs, strict=True))
    out = []
    for file, synsets in SAMPLED.items():
        texts = name_free_likelihood_texts(by_file[file], synsets, 10, seed=0)
        for s in synsets:
            concept = by_file[file].get(s)
            out.append((concept, name_free_positives(concept, 20, seed=0), texts.on[s]))
    return out


def _pattern(frame: str) -> re.Pattern[str]:
    """The frame as a regex with each field a group."""
    parts = re.split(r"(\{[xay]\})", frame)
    return re.compile(
        "".join(
            f"(?P<{p[1]}>.+?)" if re.fullmatch(r"\{[xay]\}", p) else re.escape(p) for p in parts
        )
        + "$"
    )


def _slots(text: str, frames: list[str]) -> tuple[str, dict[str, str]]:
    """The frame a text was made from and what fills its fields."""
    for frame in frames:
        match = _pattern(frame).match(text)
        if match:
            return frame, match.groupdict()
    raise AssertionError(f"no frame made {text!r}")


def test_sampled_texts_never_name_the_concept_nor_a_taxon(sampled):
    for concept, positives, likelihood in sampled:
        avoid = avoided_words(concept)
        assert positives and likelihood, concept.synset
        for text in positives + likelihood:
            # hyphenated names are read word by word: "Ile-de-France" names France
            assert not mentions(text.replace("-", " "), avoid), (concept.synset, text)
            assert not TAXON.search(text), text
            assert not re.search(r"\bgenus\b|\bfamily\b", text), text


def test_no_bare_singular_count_noun_after_about_or_on(sampled):
    """A count noun in a topic slot is plural ("about ballrooms") or has its article
    ("a ballroom, ..."); a one-of slot has "a"/"an" by sound."""
    nouns = [*LIKELIHOOD_FRAMES["n"], *TEST_FRAMES["n"]]
    checked = 0
    for concept, positives, likelihood in sampled:
        if concept.pos == "v":
            continue
        infos = name_infos(concept)
        for text in positives + likelihood:
            _, slots = _slots(text, nouns)
            for filled in slots.values():
                head = filled.split(",")[0]
                names = [n for n in infos if head in (n, plural(n), indefinite(n))]
                assert names, (text, head)  # the slot holds a name in one of its forms
                if infos[names[0]].noun != "count":
                    continue
                checked += 1
                name = names[0]
                assert head != name, (text, "a bare singular count noun")
                if head.startswith(("a ", "an ")):
                    article = "an" if re.match(r"[aeiou]", name) else "a"
                    if not re.match(r"(uni|use|eu|one|u[bcfgklmnprst][aeiou])", name):
                        assert head.startswith(article + " "), text
    assert checked > 20


def test_articles_and_plurals():
    assert [indefinite(w) for w in ("ballroom", "anteroom", "hour", "unit", "X-ray")] == [
        "a ballroom", "an anteroom", "an hour", "a unit", "an X-ray",
    ]  # fmt: skip
    assert [plural(w) for w in ("box", "lady", "mouse", "fireman", "coat of arms", "sofa")] == [
        "boxes", "ladies", "mice", "firemen", "coats of arms", "sofas",
    ]  # fmt: skip


def test_verb_texts_use_frames_the_verb_takes(sampled):
    """A verb fills only frames WordNet lists for it: "caw" (Something ----s) is never
    given an object."""
    kinds = {f: k for k, f in (*LIKELIHOOD_VERB_FRAMES, *TEST_VERB_FRAMES)}
    wn = wordnet()
    checked = 0
    for concept, positives, likelihood in sampled:
        if concept.pos != "v":
            continue
        related: dict[str, str] = {}  # a name's first synset in relation order, as used
        for r in NAME_RELATIONS:
            for item in concept.related.get(r, []):
                related.setdefault(item.name, item.synset)
        for text in positives + likelihood:
            frame, slots = _slots(text, list(kinds))
            for verb in slots.values():
                lemmas = [
                    lm for lm in wn.synset(related[verb]).lemmas()
                    if lm.name().lower() == verb.replace(" ", "_").lower()
                ]  # fmt: skip
                ids = {i for lm in lemmas for i in lm.frame_ids()}
                ids = ids or set(wn.synset(related[verb]).frame_ids())
                assert ids & VERB_KINDS[kinds[frame]], (text, sorted(ids))
                checked += 1
    assert checked > 20
    caw = NameInfo(verb=frozenset({"what"}))
    frames = [(k, f) for k, f in LIKELIHOOD_VERB_FRAMES if "{y}" not in f]
    infos = {"caw": caw, "coo": caw}
    texts = [t for _, t in _fill(frames, infos, ["caw", "coo"], 12, random.Random(0), "v")]
    assert texts and all(kinds[_slots(t, list(kinds))[0]] == "what" for t in texts)


def test_taxonomic_and_off_sense_names_are_not_used(graphs):
    assert taxonomic("Tetrao urogallus", "none.n.01")
    assert taxonomic("Rosaceae", "rosaceae.n.01") and taxonomic("Tetrao", "tetrao.n.01")
    assert not taxonomic("Wales", "wales.n.01") and not taxonomic("ballroom", "ballroom.n.01")
    # a genus's names are genera: no name-free texts (NaN rows), not texts that name a taxon
    assert name_halves(graphs[0].get("bird_genus.n.01"), 0) == ([], [])
    assert not name_free_positives(graphs[1].get("dicot_family.n.01"), 10, seed=0)
    # "office" is first a place of business, not a state; "status" is a state first
    state = {n for half in name_halves(graphs[1].get("state.n.02"), 0) for n in half}
    assert "office" not in state and "status" in state


def test_descriptions_come_from_glosses_that_do_not_name_the_concept(graphs):
    described = 0
    for graph in graphs:
        for concept in graph.concepts:
            words = avoided_words(concept) | concept_words(list(name_infos(concept)))
            for name, info in name_infos(concept).items():
                if info.gloss:
                    described += 1
                    assert not mentions(info.gloss, words - concept_words([name])), (name, info)
                    assert len(info.gloss.split()) <= 12
    assert described > 50


def test_texts_are_seeded(graphs):
    graph = graphs[1]
    first = name_free_likelihood_texts(graph, ["room.n.01", "utter.v.02"], 10, seed=0)
    again = name_free_likelihood_texts(graph, ["room.n.01", "utter.v.02"], 10, seed=0)
    other = name_free_likelihood_texts(graph, ["room.n.01", "utter.v.02"], 10, seed=1)
    assert first.to_dict() == again.to_dict() and first.on != other.on
    room = graph.get("room.n.01")
    assert name_free_positives(room, 10, 0) == name_free_positives(room, 10, 0)


# ---------------------------------------------------------------- the perplexity filter


def _letters_scorer(texts):
    """A deterministic, real scorer: the mean over words of a letter-bigram NLL fitted
    on the frames (a text whose words are rare letter sequences reads worse)."""
    corpus = " ".join(f.lower() for f in (*LIKELIHOOD_FRAMES["n"], *TEST_FRAMES["n"]))
    pairs = collections.Counter(itertools.pairwise(corpus))
    total = sum(pairs.values())
    out = []
    for text in texts:
        t = text.lower()
        nll = [-math.log((pairs[p] + 0.5) / (total + 0.5 * 27 * 27)) for p in itertools.pairwise(t)]
        out.append(sum(nll) / max(1, len(nll)))
    return out


def test_drop_worst_keeps_the_best_read_fraction_in_order():
    texts = ["the cat sat.", "zxq vvk jjq.", "the dog sat on the mat.", "qqq xzx.", "a hat."]
    scores = _letters_scorer(texts)
    kept = drop_worst(texts, _letters_scorer, 0.6)
    assert len(kept) == 3 and kept == [t for t in texts if t in kept]  # order kept
    assert "zxq vvk jjq." not in kept and "qqq xzx." not in kept
    assert max(scores[texts.index(t)] for t in kept) <= min(
        scores[texts.index(t)] for t in texts if t not in kept
    )
    assert drop_worst(texts, lambda ts: pytest.fail("1 scores nothing"), 1.0) == texts
    with pytest.raises(ValueError):
        drop_worst(texts, lambda ts: [0.0], 0.5)


def test_the_filter_keeps_n_texts_per_concept_and_drops_the_worst(graphs, tiny_lm):
    """With the tiny Gemma as scorer (the study's scorer, on a random model): each
    concept still gets n texts, each the best-read of its candidates."""
    from experiments.identify.stages.subset import nll_scorer

    graph = graphs[1]
    synsets = ["room.n.01", "garment.n.01", "utter.v.02"]
    scorer = nll_scorer(tiny_lm, "Here is a text:")
    plain = name_free_likelihood_texts(graph, synsets, 10, seed=0)
    kept = name_free_likelihood_texts(graph, synsets, 5, seed=0, scorer=scorer, keep=0.5)
    for s in synsets:
        assert len(kept.on[s]) == 5 and len(kept.off[s]) == 5
        candidates = plain.on[s]  # the same draw: 10 = 5 / 0.5 candidates
        assert set(kept.on[s]) <= set(candidates)
        nll = dict(zip(candidates, scorer(candidates), strict=True))
        dropped = [t for t in candidates if t not in kept.on[s]]
        assert max(nll[t] for t in kept.on[s]) <= min(nll[t] for t in dropped)
    positives = drop_worst_each(
        {s: name_free_positives(graph.get(s), 4, 0, keep=0.5) for s in synsets}, scorer, 0.5, 4
    )
    assert all(len(p) == 4 for p in positives.values())
