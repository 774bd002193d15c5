"""``panel --rubric axbench`` on an identify run: the rubric read as an outcome of the
direction (``identify/estimation/rubric.py``), on a real MLflow store, judged by the real OpenAI
SDK against a loopback server.

The synthetic identify run has three concepts, each with v* and two iso-cos directions
at 45° (good: cos ≥ 0.7) and one at 90° (not good), eight texts per direction and their
unsteered twins. Each direction of a concept has a strength q (0, 1 or 2, permuted per
concept) that its texts carry as a marker and its likelihood pairs and Δ follow. A judge
that reads the marker ranks the directions reliably and agrees with the likelihood; one
that scores by a hash of the text does neither."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest

from experiments import tracking
from experiments.config import load_config
from experiments.rundir import RUN_DIR_TAG, RunDir
from experiments.validation.axbench import CHILD_RUN_NAME, run_axbench_for
from experiments.validation.errors import ValidationInputError

CONCEPTS = [("person.n.01", "person"), ("change.v.01", "change"), ("herb.n.01", "herb")]
COS = {"reference": 1.0, "isocos:45:0": 0.7071, "isocos:45:1": 0.7071, "isocos:90:0": 0.0}
PROMPTS, SAMPLES, PAIRS = 2, 4, 10
JUDGE = "openai/gpt-4o-mini"


def strengths() -> dict[tuple[str, str], int]:
    """Each concept's good directions get q = 0, 1, 2 in a concept's own order."""
    rng = np.random.default_rng(5)
    out = {}
    for synset, _ in CONCEPTS:
        for d, q in zip(list(COS)[:3], rng.permutation(3), strict=True):
            out[(synset, d)] = int(q)
        out[(synset, "isocos:90:0")] = 0
    return out


def scores_of(delta: float) -> dict:
    return {
        "delta": delta, "perplexity": 10.0, "near_empty": False, "is_echo": False,
        "repetition": 1.0,
    }  # fmt: skip


def make_identify_run(root, status: str = "FINISHED") -> str:
    """A finished identify parent and its folder: config, generations (with scores),
    directions.csv and likelihood.jsonl, as identify writes them."""
    q = strengths()
    rng = np.random.default_rng(0)
    results = root / "res"
    run_id = tracking.start_run("identify-axbench", "identify", tags={"phase": "6-identify"})
    folder = RunDir(results, run_id).create()
    tracking.client().set_tag(run_id, RUN_DIR_TAG, str(folder.path))  # as identify tags it
    # the texts are markers for the judge, not language: the gate's non-language rule off
    overrides = [f"identify.results_dir={results}", "gate.alphabetic_multiple=null"]
    folder.write_config(load_config(None, overrides, "identify"))
    generations, likelihood, rows, i = [], [], [], 0
    for synset, name in CONCEPTS:
        for p in range(PROMPTS):
            for n in range(SAMPLES):
                unit = {
                    "concept": synset, "concept_name": name, "prompt_index": p, "sample": n,
                    "prompt": f"Tell me about something {p}.", "seed": 1, "split": "report",
                    "arm": "concept", "beta": 0.1,
                }  # fmt: skip
                key = f"{synset}|p{p}|n{n}|s+0.000"
                generations.append(
                    {**unit, "key": key, "strength": 0.0, "text": f"plain words #{i}",
                     **scores_of(float(rng.normal(0, 0.01)))}
                )  # fmt: skip
                i += 1
                for d in COS:
                    level = q[(synset, d)]
                    generations.append(
                        {**unit, "key": f"{key[:-8]}s+1.000|v{d}|b0.1", "strength": 1.0,
                         "vectors": d, "text": f"MARK{level} text #{i}",
                         **scores_of(0.1 * level + float(rng.normal(0, 0.02)))}
                    )  # fmt: skip
                    i += 1
        for d, cos in COS.items():
            e = 0.3 * q[(synset, d)] + rng.normal(0, 0.05, PAIRS)
            likelihood += [
                {"concept": synset, "arm": d, "direction": d, "strength": 1.0, "pair": k,
                 "e": float(v), "beta": 0.1}
                for k, v in enumerate(e)
            ]  # fmt: skip
            rows.append({"concept": synset, "direction": d, "cos_ref": cos, "effect": e.mean()})
    folder.file(RunDir.GENERATIONS).write_text("".join(json.dumps(r) + "\n" for r in generations))
    folder.append_likelihood(likelihood)
    pd.DataFrame(rows).to_csv(folder.file(RunDir.DIRECTIONS), index=False)
    tracking.end_run(run_id, status)
    return run_id


def marker_judge(lb):
    """Reads the text's marker: concept = q (0 for an unsteered text)."""

    def answer(body: dict) -> str:
        text = lb.user_text(body)
        concept = next((int(text[text.index(m) + 4]) for m in ("MARK",) if m in text), 0)
        return json.dumps({"concept": concept, "instruction": 1, "fluency": 2})

    return answer


def hash_judge(lb):
    """Ignores the marker: concept 0-2 from a hash of the whole request."""

    def answer(body: dict) -> str:
        digest = hashlib.sha256(lb.user_text(body).encode()).digest()
        return json.dumps({"concept": digest[0] % 3, "instruction": 1, "fluency": 2})

    return answer


def rate(run_id, tmp_path, kit, monkeypatch, judge):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-identify-0000")
    lb = kit.loopback()
    with lb.LoopbackServer(default=lb.ok(answer=judge(lb))) as server:
        outcome = run_axbench_for(
            run_id, [JUDGE], 1.0, openai_base_url=server.openai_url, cache_dir=tmp_path / "jc"
        )
        sent = server.n_requests
    return outcome, sent


def test_a_judge_that_reads_the_direction_is_reliable_and_agrees_with_the_likelihood(
    mlflow_store, tmp_path, kit, monkeypatch
):
    run_id = make_identify_run(tmp_path)
    outcome, sent = rate(run_id, tmp_path, kit, monkeypatch, marker_judge)
    assert sent == len(CONCEPTS) * PROMPTS * SAMPLES * (len(COS) + 1)  # every text once
    v = outcome.validity
    assert v is not None and v.evaluable
    assert v.n_directions == 9 and v.n_concepts == 3  # the 90° direction is not good
    assert v.n_texts == 9 * PROMPTS * SAMPLES
    assert v.reliability_rubric is not None and v.reliability_rubric.estimate > 0.9
    assert v.reliability_likelihood is not None and v.reliability_likelihood.estimate > 0.9
    assert v.agreement_likelihood is not None and v.agreement_likelihood.observed.estimate > 0.9
    assert v.agreement_generated is not None and v.agreement_generated.observed.estimate > 0.9
    by = {r["direction"]: r for r in v.per_direction}
    assert set(by) == set(list(COS)[:3])
    # The paired rubric effect: hm(q, 1, 2) less the twin's hm(0, 1, 2) = 0.
    hm = {0: 0.0, 1: 3 / (1 + 1 + 0.5), 2: 3 / (0.5 + 1 + 0.5)}
    q = strengths()
    expected = np.mean([hm[q[(c, "reference")]] for c, _ in CONCEPTS])
    assert by["reference"]["hm_effect"] == pytest.approx(expected)
    # The run folder holds the result; the child run its metrics and a note; no key.
    folder = RunDir(tmp_path / "res", run_id)
    stored = json.loads(folder.file(RunDir.AXBENCH_IDENTIFY).read_text())
    assert stored == v.stored() and stored["judges"] == [JUDGE]
    assert stored["reliability_rubric"] == v.reliability_rubric.to_dict()
    child = next(
        c for c in tracking.child_runs(run_id, "identify-axbench")
        if c.info.run_name == CHILD_RUN_NAME
    )  # fmt: skip
    run = tracking.get_run(child.info.run_id)
    metric = run.data.metrics["rubric/reliability_rubric"]
    assert metric == pytest.approx(v.reliability_rubric.estimate)
    assert "rubric/agreement_likelihood_disattenuated" in run.data.metrics
    assert "AxBench rubric" in run.data.tags["mlflow.note.content"]
    assert "SECRET" not in json.dumps([run.data.params, run.data.tags, stored])


def test_a_judge_blind_to_the_direction_is_not_reliable(mlflow_store, tmp_path, kit, monkeypatch):
    run_id = make_identify_run(tmp_path)
    outcome, _ = rate(run_id, tmp_path, kit, monkeypatch, hash_judge)
    v = outcome.validity
    assert v is not None and v.evaluable and v.agreement_likelihood is not None
    assert v.reliability_rubric is not None and v.reliability_rubric.estimate < 0.5
    # the likelihood is unchanged
    assert v.reliability_likelihood is not None and v.reliability_likelihood.estimate > 0.9
    assert abs(v.agreement_likelihood.observed.estimate) < 0.5


def test_only_phase5_and_identify_parents_finished_are_rated(mlflow_store, tmp_path, kit):
    other = tracking.start_run("identify-axbench", "calibration", tags={"phase": "6"})
    tracking.end_run(other)
    with pytest.raises(ValidationInputError, match="not a Phase 5 or identify parent run"):
        run_axbench_for(other, [JUDGE], 1.0)
    stopped = make_identify_run(tmp_path, status="KILLED")
    with pytest.raises(ValidationInputError, match="steer-eval identify --resume"):
        run_axbench_for(stopped, [JUDGE], 1.0)
