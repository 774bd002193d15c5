"""The answer key and the CSV are byte-for-byte what earlier releases wrote.

The golden hashes were computed with the pre-refactor ``experiments.human`` on the same
input: an answer key or a CSV from an earlier export must still verify and compare.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from experiments.validation.errors import ValidationInputError
from experiments.validation.human.answer_key import (
    build_answer_key,
    key_body_hash,
    parse_answer_key,
)
from experiments.validation.human.csvio import CSV_COLUMNS, REDACTED, csv_text
from experiments.validation.human.sample import stratified_sample
from experiments.validation.runs import ScoredGeneration, cell_key

GOLDEN_KEY_HASH = "e21160e3895e4385b6e26417096eda18a4768ab00873173662b7033ac3995b75"
GOLDEN_CSV_SHA256 = "c0703477b57337376302b53d283cc3873ea05eae12ce9f1de7a1658ae217cb63"
PAYLOADS = [
    '=HYPERLINK("http://evil.example","click")',
    "+1+1 plus",
    "\tTAB first",
    'a comma, a "quote" and\na newline',
    "escape \x1b[31m red",
    "plain",
]


def fixed_export() -> tuple[dict, list[ScoredGeneration]]:
    records, i = [], 0
    for synset, name in (("person.n.01", "person"), ("bird_genus.n.01", "bird genus")):
        for s in (-1.0, 0.0, 1.0):
            for p in range(2):
                records.append(
                    ScoredGeneration(
                        key=f"{synset}|p{p}|s{s:+.3f}",
                        concept=synset,
                        concept_name=name,
                        prompt_index=p,
                        prompt=f"Tell me about {name}.",
                        sample=0,
                        strength=s,
                        text=f"{PAYLOADS[i % len(PAYLOADS)]} #{i}",
                        delta=round(0.1 * s + 0.01 * i, 4),
                    )
                )
                i += 1
    children = {cell_key(r.concept, r.strength): f"child{j:02d}" for j, r in enumerate(records)}
    samples = stratified_sample(records, 7, seed=5)
    lemmas = {"person.n.01": ["person", "someone"]}
    return build_answer_key("0" * 32, samples, children, lemmas, 5, 7), samples


def test_key_and_csv_match_earlier_releases():
    key, samples = fixed_export()
    assert key["key_hash"] == GOLDEN_KEY_HASH == key_body_hash(key)
    rows = [
        {"sample_id": e["sample_id"], "concept": REDACTED, "generated_text": r.text}
        for e, r in zip(key["samples"], samples, strict=True)
    ]
    text = csv_text(CSV_COLUMNS, rows)
    assert hashlib.sha256(text.encode()).hexdigest() == GOLDEN_CSV_SHA256


def test_a_key_is_bound_to_its_run_and_content():
    key, _ = fixed_export()
    data = json.dumps(key).encode()
    assert parse_answer_key(data, "k", "0" * 32)["key_hash"] == GOLDEN_KEY_HASH
    with pytest.raises(ValidationInputError, match="belongs to run"):
        parse_answer_key(data, "k", "1" * 32)
    key["samples"][0]["delta"] = 0.99
    with pytest.raises(ValidationInputError, match="hash check"):
        parse_answer_key(json.dumps(key).encode(), "k")
    with pytest.raises(ValidationInputError, match="not a steer-eval answer key"):
        parse_answer_key(b"{}", "k")
