"""Your own concepts outside WordNet (experiments.concepts.own_concepts): a JSON or CSV
list validated at load, errors naming the row and field, negatives and neutral texts
chosen by a stated rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.concepts import (
    DEFAULT_PATH,
    OWN_NEGATIVES,
    ConceptError,
    concept_words,
    load_concepts,
    mentions,
)
from experiments.kernel.probes import graph_key
from experiments.prompts import centroid_texts, probe_eval_set, probe_training_set

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "data" / "concepts" / "own_example.json"
EXAMPLE_CSV = REPO / "data" / "concepts" / "own_example.csv"


def write(tmp_path: Path, rows, name: str = "mine.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(rows) if name.endswith(".json") else rows, encoding="utf-8")
    return path


def concept(name: str, **fields) -> dict:
    return {
        "name": name,
        "definition": f"the thing called {name} in this test",
        "related": [f"{name} friend"],
        **fields,
    }


def test_the_example_file_loads_with_texts_for_every_centroid_and_probe_split():
    graph = load_concepts(EXAMPLE)
    assert graph.synsets == ["blockchain", "podcast", "selfie", "ransomware"]
    for c in graph:
        assert c.lemmas[0] == c.name and c.related_terms
        assert len(c.negatives) == OWN_NEGATIVES
        texts = centroid_texts(c, 5, 0)
        assert any("is a type of" in t for t in texts["boundary"])
        assert any("is related to" in t for t in texts["boundary"])
        assert all(c.name.lower() not in t.lower() for t in texts["negative"][1:])
        assert len(probe_eval_set(c, graph, 20, 0, "test")) == 40
        assert len(probe_training_set(c, graph, 5, 5, 5, 0)) == 15


def test_json_and_csv_give_the_same_concepts():
    from_json, from_csv = load_concepts(EXAMPLE), load_concepts(EXAMPLE_CSV)
    assert from_json.concepts == from_csv.concepts
    assert from_json.neutral_pool == from_csv.neutral_pool


def test_negatives_and_neutral_texts_never_mention_the_concept(tmp_path):
    rows = [
        concept("tea ceremony", related=["matcha"]),
        concept("matcha", related=["green powder"]),  # related to the first: not its negative
        concept("origami", related=["paper folding"]),
    ]
    graph = load_concepts(write(tmp_path, rows))
    shipped = load_concepts(DEFAULT_PATH)
    for c in graph:
        words = concept_words(c.lemmas)
        assert not any(mentions(f"{n.name} {n.gloss}", words) for n in c.negatives)
    ids = {c.synset: {n.synset for n in c.negatives} for c in graph}
    assert "matcha" not in ids["tea_ceremony"] and "tea_ceremony" not in ids["matcha"]
    everyone = set().union(*(concept_words(c.lemmas) for c in graph))
    assert all(not mentions(f"{n.name} {n.gloss}", everyone) for n in graph.neutral_pool)
    assert {n.synset for n in graph.neutral_pool} <= {n.synset for n in shipped.neutral_pool}
    # the same file gives the same graph; an edit gives the probes another folder
    again = load_concepts(write(tmp_path, rows))
    assert again == graph
    edited = load_concepts(write(tmp_path, [*rows[:2], concept("kirigami")], "edited.json"))
    assert graph_key(edited) != graph_key(graph)


def test_ids_select_concepts_and_lists_may_be_wrapped(tmp_path):
    path = write(tmp_path, {"concepts": [concept("tea ceremony"), concept("origami", id="ori")]})
    assert load_concepts(path).synsets == ["tea_ceremony", "ori"]
    assert load_concepts(path, synsets=["ori"]).synsets == ["ori"]


BAD_ROWS = [
    (
        [{"name": "x", "related": ["y"]}],
        r"mine\.json: concepts\[0\] \('x'\): 'definition' is missing or empty",
    ),
    (
        [concept("x", defintion="typo")],
        r"concepts\[0\] \('x'\): unknown field 'defintion'; the fields are name, definition",
    ),
    ([concept("x", related=[])], r"concepts\[0\] \('x'\): 'related' is missing or empty"),
    ([concept("x", related="y")], r"'related' must be a list of strings"),
    ([concept("x", related=["y", 3])], r"'related' item 2 must be a string, got int"),
    ([concept("x"), concept("X")], r"two concepts share the id 'x'"),
    ([concept("x", id="a b")], r"'id' 'a b' must be letters, digits"),
    ([concept("x", pos="adj")], r"'pos' must be n \(noun\) or v \(verb\), got 'adj'"),
    ([concept("x", broader=["X"])], r"'broader' names the concept itself \(X\)"),
    (
        [concept("x", examples=["Tell me about x."])],
        r"contains the generation prompt 'tell me about'",
    ),
    ([], r"mine\.json: holds no concepts"),
    (["just a word"], r"concepts\[0\]: expected an object with name, definition, related"),
    ({"hello": 1}, r"not a concept graph \(no 'format'\) nor a list of concepts"),
]


@pytest.mark.parametrize(("rows", "message"), BAD_ROWS)
def test_bad_rows_are_named_by_row_and_field(tmp_path, rows, message):
    with pytest.raises(ConceptError, match=message):
        load_concepts(write(tmp_path, rows))


def test_csv_errors_name_the_line(tmp_path):
    header = "name,definition,related\n"
    path = write(tmp_path, header + "tea,a drink,leaf\norigami,,paper\n", "mine.csv")
    with pytest.raises(ConceptError, match=r"mine\.csv: line 3 \('origami'\): 'definition'"):
        load_concepts(path)
    path = write(tmp_path, header + "tea,a drink, hot,leaf\n", "mine.csv")
    with pytest.raises(ConceptError, match=r"mine\.csv: line 2: more cells than the header's 3"):
        load_concepts(path)
    path = write(tmp_path, "name,meaning,related\ntea,a drink,leaf\n", "mine.csv")
    with pytest.raises(ConceptError, match=r"line 2 \('tea'\): unknown field 'meaning'"):
        load_concepts(path)
    path = write(tmp_path, "", "mine.csv")
    with pytest.raises(ConceptError, match=r"mine\.csv: empty CSV"):
        load_concepts(path)
