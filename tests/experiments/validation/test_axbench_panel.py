"""``panel --rubric axbench`` on a real MLflow store: every generation rated AxBench's way
by the real OpenAI SDK against a loopback server, tabulated per concept and sign beside
Δ and the unsteered twins, logged, and priced by the dry run."""

from __future__ import annotations

import csv
import io
import json

import pytest

from experiments import tracking
from experiments.rundir import RunDir
from experiments.validation.axbench import CHILD_RUN_NAME, run_axbench_for
from experiments.validation.panel import estimate_panel_for


def scripted(lb):
    """A judge that reads what it was sent: texts that continue a "Tell me about …"
    prompt get concept 2, the others 1; instruction 1 and fluency 2 for all."""

    def answer(body: dict) -> str:
        text = lb.user_text(body)
        concept = 2 if "Tell me about" in text else 1
        return json.dumps({"concept": concept, "instruction": 1, "fluency": 2})

    return answer


def test_axbench_scores_per_concept_and_sign_beside_delta(mlflow_store, tmp_path, kit, monkeypatch):
    run_id, records = kit.make_run(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-axbench-0000")
    lb = kit.loopback()
    with lb.LoopbackServer(default=lb.ok(answer=scripted(lb))) as server:
        kwargs = dict(openai_base_url=server.openai_url, cache_dir=tmp_path / "jc")
        result, table, _skipped, validity = run_axbench_for(
            run_id, ["openai/gpt-4o-mini"], 1.0, **kwargs
        )
        sent = server.n_requests
        run_axbench_for(run_id, ["openai/gpt-4o-mini"], 1.0, **kwargs)
        assert server.n_requests == sent  # a rerun is served from the cache
        body = server.requests[0].body
    assert sent == len(records)  # one request per text
    assert validity is None  # a Phase 5 run: no direction to read the rubric as an outcome of
    assert "<prompt>\n" in lb.user_text(body) and "DATA" in lb.system_text(body)
    assert set(result.scores["concept_score"]) == {1.0, 2.0}
    # 4 concepts × 2 signs, each with its 6 steered texts and their twins' scores
    assert len(table) == 8 and set(table["sign"]) == {"pos", "neg"}
    assert (table["n_texts"] == 6).all()
    judge = "openai/gpt-4o-mini"
    row = table.iloc[0]
    assert row[f"{judge}:instruction"] == 1.0 and row[f"{judge}:fluency"] == 2.0
    hm_prompted = 3 / (1 / 2 + 1 + 1 / 2)
    hm_story = 3 / (1 + 1 + 1 / 2)
    assert row[f"{judge}:hm"] == pytest.approx((hm_prompted + hm_story * 2) / 3)
    assert row[f"{judge}:hm_twin"] == pytest.approx(row[f"{judge}:hm"])  # same prompts
    by = {(r["concept"], r["sign"]): r for r in table.to_dict("records")}
    pos = [r["delta_effect"] for (c, s), r in by.items() if s == "pos"]
    neg = [r["delta_effect"] for (c, s), r in by.items() if s == "neg"]
    assert min(pos) > max(neg)  # Δ rises with strength in the synthetic run
    # The likelihood outcome comes from the run's record, per concept and sign.
    from experiments.validation.axbench import axbench_table
    from experiments.validation.panel import panel_samples
    from experiments.validation.runs import phase5_parent

    synset = table.iloc[0]["concept"]
    samples = panel_samples(phase5_parent(run_id))
    with_lk = axbench_table(samples, result, {synset: {"likelihood_pos": 0.25}})
    lk = {(r["concept"], r["sign"]): r["likelihood"] for r in with_lk.to_dict("records")}
    missing = lk[(synset, "neg")]
    assert lk[(synset, "pos")] == 0.25 and (missing is None or missing != missing)
    # The run folder's table opens in a spreadsheet as text, and MLflow has the child run.
    folder = RunDir(tmp_path / "res", run_id)
    rows = list(csv.DictReader(io.StringIO(folder.file(RunDir.AXBENCH).read_text())))
    assert len(rows) == 8 and rows[0]["concept"] == table.iloc[0]["concept"]
    children = [
        c for c in tracking.child_runs(run_id, kit.EXPERIMENT) if c.info.run_name == CHILD_RUN_NAME
    ]
    assert len(children) == 1  # the rerun updated it
    child = tracking.get_run(children[0].info.run_id)
    assert child.data.params["rubric_version"] == "axbench-v1"
    assert f"{judge.replace(':', '/')}/hm/pos" in child.data.metrics
    everything = json.dumps([child.data.params, child.data.tags])
    assert "SECRET" not in everything  # the key never reaches MLflow
    assert "SECRET" not in folder.file(RunDir.AXBENCH).read_text()


def test_the_dry_run_prices_axbench_and_sends_nothing(mlflow_store, tmp_path, kit, monkeypatch):
    run_id, records = kit.make_run(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-dry")
    decision, estimate = estimate_panel_for(
        run_id, "always", ["openai/gpt-4o-mini"], rubric="axbench", cache_dir=tmp_path / "c"
    )
    (judge,) = estimate.judges
    assert decision.run and judge.calls == len(records) and judge.cost_usd_max > 0
    assert judge.output_tokens_max == 60 * len(records)


def test_two_judges_give_an_agreement_and_each_their_own_columns(
    mlflow_store, tmp_path, kit, monkeypatch
):
    """OpenAI and Anthropic SDKs against one loopback server: the Anthropic judge marks
    the story prompts' texts one point less fluent, so the judges agree on the concept
    but not perfectly on the harmonic mean; the agreement is computed and logged."""
    run_id, records = kit.make_run(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-two-0000")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-two-0000")
    lb = kit.loopback()

    def answer(body: dict) -> str:
        text = lb.user_text(body)
        told = "Tell me about" in text
        fluency = 2 if told or "claude" not in str(body.get("model", "")) else 1
        return json.dumps({"concept": 2 if told else 1, "instruction": 1, "fluency": fluency})

    judges = ["openai/gpt-4o-mini", "anthropic/claude-haiku-4-5"]
    with lb.LoopbackServer(default=lb.ok(answer=answer)) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_url)
        result, table, skipped, _ = run_axbench_for(
            run_id, judges, 1.0, openai_base_url=server.openai_url, cache_dir=tmp_path / "jc"
        )
        assert server.n_requests == 2 * len(records)  # one request per text and judge
    assert not skipped
    for judge in judges:
        assert f"{judge}:hm" in table.columns and f"{judge}:hm_twin" in table.columns
    from experiments.validation.axbench import agreement

    agree = agreement(result)
    pair = next(k for k in agree if k.startswith("spearman:"))
    assert agree["alpha"] is not None and 0 < agree["alpha"] < 1
    assert agree[pair] is not None and agree[pair] > 0
    child = next(
        c for c in tracking.child_runs(run_id, kit.EXPERIMENT) if c.info.run_name == CHILD_RUN_NAME
    )
    assert "agreement/alpha" in tracking.get_run(child.info.run_id).data.metrics
