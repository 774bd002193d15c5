"""What the MLflow UI shows for a run, read through the REST endpoints the UI itself calls.

A real ``mlflow server`` on loopback (``mlflow_server``) receives a whole story: a Phase 5
run on the tiny Gemma with the real MiniLM, a blind export rated and imported, and a
judge panel (an OpenAI judge through the real SDK against a scripted loopback server).
The checks then make the calls the UI makes (seen in the server's log while a browser
opened the pages): ``experiments/get`` (the experiment's kind), ``runs/search`` (the
runs table), ``traces/search`` (the Traces tab) and ``traces/<trace id>`` (one trace's
feedback), and read the prompt registry.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from experiments import tracking
from experiments.config import load_config
from experiments.phase5.run import run_phase5
from experiments.rundir import RunDir
from experiments.tracking.prompts import PROMPT_NAME
from experiments.tracking.traces import CODE_SOURCE_ID, KEY_TAG, RELATEDNESS
from experiments.validation.human.export import export_samples
from experiments.validation.human.importer import import_ratings
from experiments.validation.panel import run_panel_for

JUDGE = "openai/gpt-4o-mini"
RATER = "rater-a"


def loopback():
    name = "steer_eval_tests_judges_loopback"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[2] / "judges" / "loopback.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class Story(NamedTuple):
    uri: str
    experiment_id: str
    run_id: str
    rated: dict[str, int]  # generation key -> human rating
    n_generations: int


def rate_export(csv_path: Path, key_path: Path) -> tuple[Path, dict[str, int]]:
    """Fill the blind CSV as a rater would (a rating per row, from the text's length)."""
    key = json.loads(key_path.read_text())
    by_sample = {s["sample_id"]: s["generation_key"] for s in key["samples"]}
    with csv_path.open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.DictReader(handle))
    rated = {}
    for row in rows:
        rating = len(row["generated_text"]) % 11
        row["human_rating"] = str(rating)
        rated[by_sample[row["sample_id"]]] = rating
    out = csv_path.with_name("rated.csv")
    with out.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out, rated


def tell_story(tmp: Path, lm, embedder) -> tuple[str, dict[str, int], int]:
    """Phase 5, human export + import, and the panel, against the configured store."""
    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=3",
            "generation.max_new_tokens=12",
            "generation.batch_size=4",
            "layer=2",
            f"classifier.dir={tmp / 'cls'}",
            f"tracking.results_dir={tmp / 'res'}",
        ],
    )
    result = run_phase5(config, lm=lm, embedder=embedder)
    export = export_samples(result.run_id, n=20, seed=0)
    rated_csv, rated = rate_export(export.csv_path, export.key_path)
    import_ratings(rated_csv, result.run_id, min_rated=10, rater=RATER)
    lb = loopback()

    def answer(body: dict) -> str:
        return json.dumps({"score": len(lb.user_text(body)) % 11})

    old_key = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = "sk-test-loopback"
    try:
        with lb.LoopbackServer(default=lb.ok(answer=answer)) as server:
            run_panel_for(
                result.run_id,
                "always",
                [JUDGE],
                1.0,
                openai_base_url=server.openai_url,
                progress=False,
                cache_dir=tmp / "judge-cache",
            )
    finally:
        if old_key is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = old_key
    n = len(RunDir(config.tracking.results_dir, result.run_id).read_generations())
    return result.run_id, rated, n


def call(uri: str, path: str, body: dict | None = None, **query: str) -> dict[str, Any]:
    """One request as the UI's JavaScript sends it (``/ajax-api/...``)."""
    url = f"{uri}/ajax-api/{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        headers={"Content-Type": "application/json"},
        method="POST" if data else "GET",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def story(mlflow_server, tiny_lm, embedder, tmp_path_factory) -> Story:
    import torch

    uri, _root = mlflow_server
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny model is faster on one thread (conftest one_thread)
    try:
        run_id, rated, n = tell_story(tmp_path_factory.mktemp("story"), tiny_lm, embedder)
    finally:
        torch.set_num_threads(threads)
    experiment_id = tracking.get_run(run_id).info.experiment_id
    return Story(uri, experiment_id, run_id, rated, n)


def test_the_experiment_opens_on_its_runs(story):
    exp = call(story.uri, "2.0/mlflow/experiments/get", experiment_id=story.experiment_id)
    exp = exp["experiment"]
    tags = {t["key"]: t["value"] for t in exp.get("tags", [])}
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    # MLflow 3.17's UI picks its view from the address; ours asks for the runs view.
    url = tracking.ui_url(story.experiment_id, story.run_id)
    assert url.startswith(story.uri) and "workflowType=machine_learning" in url
    # The runs table: what the Runs view requests when it opens.
    runs = call(
        story.uri,
        "2.0/mlflow/runs/search",
        {
            "experiment_ids": [story.experiment_id],
            "filter": "",
            "run_view_type": "ACTIVE_ONLY",
            "max_results": 100,
            "order_by": ["attributes.start_time DESC"],
        },
    )["runs"]
    by_id = {r["info"]["run_id"]: r for r in runs}
    parent = by_id[story.run_id]
    tags = {t["key"]: t["value"] for t in parent["data"]["tags"]}
    for key in (
        "mlflow.user",
        "mlflow.source.name",
        "mlflow.source.type",
        "mlflow.source.git.commit",
        "mlflow.note.content",
        "steer_eval.phase4_run",
    ):
        assert tags.get(key), key
    assert "git_commit" not in tags
    assert parent["info"]["run_name"] == "tiny-random-gemma3 L2 classifier β=0.2"
    params = {p["key"]: p["value"] for p in parent["data"]["params"]}
    assert "model" in params and "config.model" not in params  # each setting once
    assert params["seed/criterion/c1_direction/threshold"] == "0.8"
    metrics = {m["key"] for m in parent["data"]["metrics"]}
    assert {"alpha", "beta"} <= metrics and not any(m.endswith("/threshold") for m in metrics)
    inputs = {d["dataset"]["name"] for d in parent["inputs"]["dataset_inputs"]}
    assert inputs == {"concept-graph", "prompt-set"}
    names = {r["info"]["run_name"] for r in runs}
    assert {"human-validation", "judge-panel"} <= names
    human = next(r for r in runs if r["info"]["run_name"] == "human-validation")
    assert {d["dataset"]["name"] for d in human["inputs"]["dataset_inputs"]} == {"human-ratings"}
    # The Phase 4 run it links to is in the store.
    assert tracking.get_run(tags["steer_eval.phase4_run"]).data.tags["phase"] == "4"


def test_every_generation_has_a_trace_with_its_feedback(story):
    body = {
        "locations": [
            {
                "type": "MLFLOW_EXPERIMENT",
                "mlflow_experiment": {"experiment_id": story.experiment_id},
            }
        ],
        "filter": f"attribute.run_id = '{story.run_id}'",
        "max_results": 500,
    }
    traces = call(story.uri, "3.0/mlflow/traces/search", body)["traces"]
    assert len(traces) == story.n_generations
    keys = {t["tags"][KEY_TAG]: t["trace_id"] for t in traces}
    rated_key = next(iter(story.rated))
    detail = call(story.uri, f"3.0/mlflow/traces/{keys[rated_key]}")["trace"]
    info = detail["trace_info"]
    assert info["trace_metadata"]["mlflow.sourceRun"] == story.run_id
    request = json.loads(info["request_preview"])
    assert {"concept", "prompt", "strength", "seed"} <= set(request)
    assert "text" in json.loads(info["response_preview"])
    feedback: dict[tuple[str, str, str], Any] = {}
    for a in info["assessments"]:
        source = a["source"]
        value = a.get("feedback", {}).get("value")
        feedback[(a["assessment_name"], source["source_type"], source["source_id"])] = value
    assert feedback[(RELATEDNESS, "HUMAN", RATER)] == story.rated[rated_key]
    judge_score = feedback[(RELATEDNESS, "LLM_JUDGE", JUDGE)]
    assert 0 <= judge_score <= 10
    assert ("delta", "CODE", CODE_SOURCE_ID) in feedback
    assert ("coherence", "CODE", CODE_SOURCE_ID) in feedback
    judge = next(a for a in info["assessments"] if a["source"]["source_type"] == "LLM_JUDGE")
    assert judge["metadata"]["rubric_version"] == "relatedness-v1"
    assert judge["metadata"]["rubric_prompt"].startswith(f"prompts:/{PROMPT_NAME}/")
    # Only the rated generations carry human feedback; every one carries the judge's.
    humans = sum(
        1
        for t in traces
        for a in call(story.uri, f"3.0/mlflow/traces/{t['trace_id']}")["trace"]["trace_info"][
            "assessments"
        ]
        if a["source"]["source_type"] == "HUMAN"
    )
    assert humans == len(story.rated)


def test_the_rubric_is_versioned_in_the_prompt_registry(story):
    c = tracking.client()
    versions = c.search_prompt_versions(PROMPT_NAME)
    assert len(versions) == 1
    assert versions[0].tags["rubric_version"] == "relatedness-v1"
    assert {"{{concept}}", "{{text}}"} <= {
        token
        for message in versions[0].template
        for token in ("{{concept}}", "{{text}}")
        if token in message["content"]
    }
