"""The answer key: what the blind CSV hides (sample id -> child run, concept, Δ).

It is kept apart from the CSV and sealed by ``key_hash``, SHA-256 over the canonical
JSON of everything else in the key, which includes the run id and each sample's
``text_sha256``. That catches a key from another run or export and accidental edits; it
is not a secret signature (anyone can recompute it after a deliberate edit).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.validation.errors import ValidationInputError
from experiments.validation.human.csvio import CSV_NAME, text_digest
from experiments.validation.runs import ScoredGeneration, cell_key

KEY_NAME = "answer_key.json"
KEY_FORMAT = "steer-eval/human-answer-key"
KEY_FORMAT_VERSION = 1


def key_body_hash(key: dict[str, Any]) -> str:
    """The hash over everything but ``key_hash`` itself."""
    body = {k: v for k, v in key.items() if k != "key_hash"}
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def build_answer_key(
    run_id: str,
    samples: Sequence[ScoredGeneration],
    children: dict[str, str],
    lemmas: dict[str, list[str]],
    seed: int,
    n_requested: int,
) -> dict[str, Any]:
    """The answer key for ``samples`` (in CSV order), sealed by ``key_hash``.

    ``children`` maps cell tags to child run ids, ``lemmas`` gives each concept's lemmas
    for topic-guess matching at import.
    """
    width = max(3, len(str(len(samples))))
    entries = []
    for i, record in enumerate(samples, start=1):
        cell = cell_key(record.concept, record.strength)
        entries.append(
            {
                "sample_id": f"{i:0{width}d}",
                "child_run_id": children[cell],
                "cell": cell,
                "concept": record.concept,
                "concept_name": record.concept_name,
                "strength": record.strength,
                "prompt": record.prompt,
                "prompt_index": record.prompt_index,
                "sample": record.sample,
                "delta": record.delta,
                "generation_key": record.key,
                "text_sha256": text_digest(record.text),
            }
        )
    concepts = {
        r.concept: {
            "name": r.concept_name,
            "lemmas": sorted(lemmas.get(r.concept, [r.concept_name])),
        }
        for r in samples
    }
    cells = Counter(cell_key(r.concept, r.strength) for r in samples)
    key = {
        "format": KEY_FORMAT,
        "format_version": KEY_FORMAT_VERSION,
        "run_id": run_id,
        "seed": seed,
        "n_requested": n_requested,
        "n": len(entries),
        "csv_file": CSV_NAME,
        "stratification": dict(sorted(cells.items())),
        "concepts": dict(sorted(concepts.items())),
        "samples": entries,
    }
    key["key_hash"] = key_body_hash(key)
    return key


def load_answer_key(path: Path, run_id: str | None = None) -> dict[str, Any]:
    """Read and verify an answer key file (format, hash, and the run it belongs to)."""
    path = Path(path)
    if not path.is_file():
        raise ValidationInputError(f"answer key {path} does not exist")
    return parse_answer_key(path.read_bytes(), str(path), run_id)


def parse_answer_key(data: bytes, source: str, run_id: str | None = None) -> dict[str, Any]:
    """Verify an answer key's format, its hash, and (when given) the run it belongs to."""
    try:
        key = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValidationInputError(f"answer key {source} is not valid JSON: {exc}") from None
    if not isinstance(key, dict) or key.get("format") != KEY_FORMAT:
        raise ValidationInputError(f"{source} is not a steer-eval answer key")
    if key.get("format_version") != KEY_FORMAT_VERSION:
        raise ValidationInputError(
            f"{source}: answer key version {key.get('format_version')!r}, expected "
            f"{KEY_FORMAT_VERSION}"
        )
    if key.get("key_hash") != key_body_hash(key):
        raise ValidationInputError(
            f"answer key {source} fails its hash check: it was edited after export; "
            "re-export or restore the original"
        )
    if run_id is not None and key.get("run_id") != run_id:
        raise ValidationInputError(
            f"answer key {source} belongs to run {key.get('run_id')}, not {run_id}"
        )
    return key


def key_samples(key: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """sample id -> the key's entry for it."""
    return {s["sample_id"]: s for s in key["samples"]}
