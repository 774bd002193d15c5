"""Part C wiring: the trigger, a real panel on a real Phase 5 run, MLflow and criterion 4.

The local judge runs for real on the embedded GGUF; the OpenAI judge runs through the
real SDK against a loopback server (tests/judges/loopback.py).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments import tracking
from experiments.config import load_config
from experiments.phase5.run import run_phase5
from experiments.validation.panel import CHILD_RUN_NAME, When, decide, run_panel_for


def _loopback():
    name = "steer_eval_tests_judges_loopback"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[2] / "judges" / "loopback.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def parent_with(tags: dict) -> SimpleNamespace:
    return SimpleNamespace(data=SimpleNamespace(tags=tags))


def human_tag(value, status="panel_required"):
    return {
        "criterion.c4_human.json": json.dumps(
            {
                "key": "c4_human",
                "description": "",
                "status": status,
                "value": value,
                "threshold": 0.7,
                "reason": "test",
            }
        )
    }


def test_the_trigger_follows_the_seed():
    assert not decide(parent_with({}), "auto").run
    assert "human-import" in decide(parent_with({}), "auto").reason
    assert decide(parent_with(human_tag(0.3)), "auto").run
    skip = decide(parent_with(human_tag(0.8, "pass")), "auto")
    assert not skip.run and "not needed" in skip.reason
    assert not decide(parent_with(human_tag(None, "not_evaluable")), "auto").run
    assert decide(parent_with({}), "always").run
    assert decide(parent_with({}), When.ALWAYS).run and not decide(parent_with({}), When.AUTO).run
    assert not decide(parent_with(human_tag(0.3)), "auto", panel_below=0.2).run


def test_the_trigger_threshold_is_the_runs_own(mlflow_store, tmp_path, kit):
    """human_r_panel comes from the run's stored config, not the default or the params."""
    run_id, _ = kit.make_run(tmp_path, config_overrides=["criteria.human_r_panel=0.2"])
    tracking.client().set_tag(
        run_id, "criterion.c4_human.json", human_tag(0.3)["criterion.c4_human.json"]
    )
    decision, result, combined, skipped = run_panel_for(run_id, "auto", [], None)
    assert not decision.run and "≥ 0.2" in decision.reason
    assert result is None and combined is None and skipped == {}


@pytest.mark.integration
def test_panel_rates_every_generation_and_updates_criterion_4(
    tmp_path, mlflow_store, embedded_lm, embedder, monkeypatch
):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is installed by `make setup`")
    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=2",
            "generation.max_new_tokens=8",
            f"classifier.dir={tmp_path / 'cls'}",
            f"tracking.results_dir={tmp_path / 'res'}",
        ],
    )
    run = run_phase5(config, lm=embedded_lm, embedder=embedder)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-panel-0000")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    lb = _loopback()

    def rate(body: dict) -> str:  # a scripted judge: on-topic texts score high
        text = lb.user_text(body).lower()
        return '{"score": 8}' if "person" in text or "change" in text else '{"score": 3}'

    judges = ["anthropic/claude-sonnet-4-5", "openai/gpt-4o-mini", "llama/embedded"]
    with lb.LoopbackServer(default=lb.ok(answer=rate)) as server:
        kwargs = dict(
            openai_base_url=server.openai_url,
            progress=False,
            results_dir=config.tracking.results_dir,
            cache_dir=tmp_path / "jc",
        )
        skipped = run_panel_for(run.run_id, "auto", judges, 1.0, **kwargs)
        assert skipped[1] is None and not skipped[0].run  # no human ratings yet
        decision, result, combined, missing = run_panel_for(
            run.run_id, "always", judges, 1.0, **kwargs
        )
        first_requests = server.n_requests
        again = run_panel_for(run.run_id, "always", judges, 1.0, **kwargs)[1]
        assert server.n_requests == first_requests  # the rerun is served from the cache
    assert decision.run
    assert "anthropic/claude-sonnet-4-5" in missing and "ANTHROPIC_API_KEY" in str(missing)
    assert result.judges == ["openai/gpt-4o-mini", "llama/embedded"]
    n = len(run.records)
    assert len(result.scores) == 2 * n  # every generation, every judge
    assert result.scores["score"].notna().all()
    assert again.totals["cache_hits"] == 2 * n
    assert combined.key == "c4_human_or_panel"
    children = tracking.child_runs(run.run_id, config.tracking.experiment)
    panels = [c for c in children if c.info.run_name == CHILD_RUN_NAME]
    assert len(panels) == 1  # a rerun updates the one judge-panel run
    panel = tracking.get_run(panels[0].info.run_id)
    assert panel.data.tags["criterion.c4_panel"] in {"pass", "fail", "not_evaluable"}
    assert "total_ratings" in panel.data.metrics
    arts = {a.path for a in tracking.client().list_artifacts(panel.info.run_id)}
    assert {"judge_scores.json", "panel_per_sample.json", "panel_summary.json"} <= arts
    parent = tracking.get_run(run.run_id)
    assert parent.data.tags["criterion.c4_human_or_panel"] == combined.status
    # The key never reaches MLflow.
    everything = json.dumps([panel.data.params, panel.data.tags, parent.data.params])
    assert "SECRET" not in everything


def test_a_missing_text_cell_of_the_score_table_reads_empty_not_nan():
    """pandas reads an empty string cell of the judge-score table as NaN: the feedback's
    rationale, model and error read it as missing, never as the word "nan"."""
    import math

    from experiments.validation.panel import cell_text

    assert cell_text(math.nan) == "" and cell_text(None) == ""
    assert cell_text("the judge said so") == "the judge said so"
    assert cell_text(3) == "3"
