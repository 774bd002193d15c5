"""The WordNet concept graph: the committed file, the build rules and the error messages.

Uses the real WordNet (``make setup`` prepares it); nothing is mocked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.concepts import (
    ALL_RELATIONS,
    ConceptError,
    ConceptGraph,
    concept_words,
    load_concepts,
    mentions,
)
from experiments.wordnet import build_concept_graph, path_distance, top_synsets

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "data" / "concepts" / "wordnet_top10.json"
ORIGINAL_TOP10 = [
    "person.n.01",
    "change.v.01",
    "bird_genus.n.01",
    "mammal_genus.n.01",
    "herb.n.01",
    "asterid_dicot_genus.n.01",
    "shrub.n.01",
    "rosid_dicot_genus.n.01",
    "fish_genus.n.01",
    "animal_order.n.01",
]


@pytest.fixture(scope="module")
def graph() -> ConceptGraph:
    return load_concepts(COMMITTED)


@pytest.fixture(scope="module")
def wn():
    from steering.assets import use_wordnet

    use_wordnet()
    from nltk.corpus import wordnet

    return wordnet


@pytest.fixture(scope="module")
def small_graphs(wn) -> dict[int, ConceptGraph]:
    """Two small builds per seed (one noun, one verb) to check seeding without a full build."""
    ids = ["dog.n.01", "run.v.01"]
    kwargs = {"n_negatives": 12, "n_neutral": 8}
    return {
        0: build_concept_graph(ids, seed=0, **kwargs),
        1: build_concept_graph(ids, seed=1, **kwargs),
        2: build_concept_graph(ids, seed=0, **kwargs),
    }


# -- the committed file ---------------------------------------------------------


def test_committed_file_round_trips_exactly(graph: ConceptGraph) -> None:
    text = COMMITTED.read_text(encoding="utf-8")
    assert graph.to_json() == text
    assert ConceptGraph.from_json(graph.to_json()) == graph
    assert json.loads(text) == graph.to_dict()


def test_save_is_byte_identical(graph: ConceptGraph, tmp_path: Path) -> None:
    first = graph.save(tmp_path / "a.json").read_bytes()
    second = ConceptGraph.load(tmp_path / "a.json").save(tmp_path / "b.json").read_bytes()
    assert first == second == COMMITTED.read_bytes()


def test_committed_file_is_the_original_top10(graph: ConceptGraph) -> None:
    assert graph.synsets == ORIGINAL_TOP10
    assert graph.seed == 0 and graph.min_distance == 5 and graph.n_negatives == 40
    assert graph.wordnet_version == "3.0"
    assert [c.n_links for c in graph] == sorted((c.n_links for c in graph), reverse=True)
    person = graph.get("person.n.01")
    assert person.name == "person" and person.pos == "n" and person.gloss == "a human being"
    assert graph.get("bird_genus.n.01").name == "bird genus"
    assert graph.get("change.v.01").pos == "v"


def test_top_synsets_reproduces_the_original_list(wn) -> None:
    assert top_synsets(10) == ORIGINAL_TOP10


def test_related_lists_are_sorted_unique_and_exclude_the_concept(graph: ConceptGraph) -> None:
    for concept in graph:
        assert concept.related, concept.synset
        for relation, items in concept.related.items():
            assert relation in ALL_RELATIONS
            ids = [item.synset for item in items]
            assert ids == sorted(set(ids)), (concept.synset, relation)
            assert concept.synset not in ids
            assert all(
                " " not in s and "_" not in item.name for s, item in zip(ids, items, strict=True)
            )
        terms = concept.related_terms
        assert terms == sorted(set(terms))
        own = {lemma.lower() for lemma in concept.lemmas}
        assert not own & {t.lower() for t in terms}
        assert all("_" not in lemma for lemma in concept.lemmas)


def test_related_matches_wordnet(graph: ConceptGraph, wn) -> None:
    for concept in graph:
        synset = wn.synset(concept.synset)
        for relation in ("hypernyms", "hyponyms", "member_meronyms", "part_meronyms"):
            expected = sorted(s.name() for s in getattr(synset, relation)())
            got = [item.synset for item in concept.related.get(relation, [])]
            assert got == expected, (concept.synset, relation)
        # n_links follows the documented rule (hyponyms are most of it)
        assert concept.n_links >= len(synset.hyponyms())


def test_negatives_are_far_of_the_same_pos_and_never_name_the_concept(
    graph: ConceptGraph, wn
) -> None:
    for concept in graph:
        negatives = concept.negatives
        assert len(negatives) == graph.n_negatives == 40
        assert len({n.synset for n in negatives}) == 40
        assert len({n.name.lower() for n in negatives}) == 40
        related = set(concept.related_synsets())
        words = concept_words(concept.lemmas)
        synset = wn.synset(concept.synset)
        for negative in negatives:
            assert negative.distance >= graph.min_distance
            assert negative.synset not in related
            assert negative.synset != concept.synset
            assert not mentions(f"{negative.name} {negative.gloss}", words), negative
        for negative in negatives[:4]:  # recompute a few with WordNet
            other = wn.synset(negative.synset)
            assert other.pos() == synset.pos()
            assert path_distance(synset, other) == negative.distance
            assert other.definition() == negative.gloss


def test_negatives_exclude_descendants_and_member_linked_topics(wn) -> None:
    graph = build_concept_graph(["bird_genus.n.01"], n_negatives=40, n_neutral=0)
    bird = wn.synset("bird.n.01")
    for negative in graph.concepts[0].negatives:
        ancestors = wn.synset(negative.synset).closure(lambda s: s.hypernyms())
        assert bird not in ancestors, negative  # no birds as "not a bird genus"


def test_neutral_pool_is_far_from_every_concept(graph: ConceptGraph, wn) -> None:
    pool = graph.neutral_pool
    assert len(pool) == 60
    assert len({item.synset for item in pool}) == 60
    concepts = [wn.synset(c.synset) for c in graph]
    words = set().union(*(concept_words(c.lemmas) for c in graph))
    for item in pool:
        assert not mentions(f"{item.name} {item.gloss}", words), item
    for item in pool[:6]:
        other = wn.synset(item.synset)
        for concept in concepts:
            distance = path_distance(concept, other)
            assert distance is None or distance >= graph.min_distance


def test_same_seed_same_graph_other_seed_other_negatives(small_graphs) -> None:
    assert small_graphs[0].to_json() == small_graphs[2].to_json()
    for a, b in zip(small_graphs[0].concepts, small_graphs[1].concepts, strict=True):
        assert [n.synset for n in a.negatives] != [n.synset for n in b.negatives]
    assert small_graphs[0].neutral_pool != small_graphs[1].neutral_pool
    assert small_graphs[1].seed == 1


def test_verb_negatives_are_not_kinds_of_the_verb(small_graphs, wn) -> None:
    run = wn.synset("run.v.01")
    for negative in small_graphs[0].get("run.v.01").negatives:
        other = wn.synset(negative.synset)
        assert other.pos() == "v"
        assert run not in other.closure(lambda s: s.hypernyms())


# -- errors ----------------------------------------------------------------------


def test_unknown_synset_is_a_clear_error(wn) -> None:
    with pytest.raises(
        ConceptError, match=r"no WordNet synset 'dgo\.n\.01'; ids look like dog\.n\.01"
    ):
        build_concept_graph(["dgo.n.01"])
    with pytest.raises(ConceptError, match="synsets for 'dog'"):
        build_concept_graph(["dog"])


def test_too_few_negatives_is_a_clear_error(wn) -> None:
    with pytest.raises(ConceptError, match=r"person\.n\.01: found only 0 of 40 negatives.*>= 40"):
        build_concept_graph(["person.n.01"], min_distance=40, max_tries=300)


def test_load_concepts_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ConceptError, match=r"nope\.json does not exist.*steer-eval concepts"):
        load_concepts(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConceptError, match=r"bad\.json: not valid JSON"):
        load_concepts(bad)
    data = json.loads(COMMITTED.read_text())
    del data["concepts"][2]["gloss"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data))
    with pytest.raises(ConceptError, match=r"broken\.json: concepts\[2\]: missing key 'gloss'"):
        load_concepts(broken)
    data = json.loads(COMMITTED.read_text())
    data["concepts"][0]["negatives"][3]["distance"] = "far"
    broken.write_text(json.dumps(data))
    with pytest.raises(ConceptError, match=r"negatives\[3\]\.distance: expected int, got str"):
        load_concepts(broken)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ConceptError, match="not a concept graph"):
        load_concepts(other)


def test_load_concepts_selects(graph: ConceptGraph) -> None:
    assert load_concepts(COMMITTED, limit=3).synsets == ORIGINAL_TOP10[:3]
    picked = load_concepts(COMMITTED, synsets=["herb.n.01", "person.n.01"])
    assert picked.synsets == ["herb.n.01", "person.n.01"]
    assert picked.neutral_pool == graph.neutral_pool
    assert picked.get("herb.n.01") == graph.get("herb.n.01")
    with pytest.raises(ConceptError, match=r"no concept 'dog\.n\.01'.*person\.n\.01"):
        load_concepts(COMMITTED, synsets=["dog.n.01"])
    with pytest.raises(ConceptError, match="not in this graph"):
        graph.get("dog.n.01")
    assert graph.metadata["n_concepts"] == 10
