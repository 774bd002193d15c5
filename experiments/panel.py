"""Part C: the conditional multi-model judge panel (``steer-eval panel --run <id>``).

The seed design runs the panel only when the human-vs-Δ correlation falls below 0.5;
``--when always`` forces it. Every generation of the run is rated by every judge that
can run here (a judge without its API key is skipped, with the reason logged), and a
``judge-panel`` child run under the Phase 5 parent records the scores, agreement and
validity. Criterion 4's "panel agrees" (α ≥ 0.667 and r(panel mean, Δ) > 0.7) is then
recorded on the parent.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import pandas as pd
import typer

from experiments import tracking

DEFAULT_JUDGES = ("anthropic/claude-sonnet-4-5", "openai/gpt-4o-mini", "llama/embedded")
CHILD_RUN_NAME = "judge-panel"
CHILD_PHASE = "5C"


@dataclass(frozen=True)
class Decision:
    run: bool
    reason: str
    human_r: float | None


def decide(parent, when: Literal["auto", "always"], panel_below: float = 0.5) -> Decision:
    """Whether the panel should run, and why: the seed's trigger is human r < 0.5."""
    raw = parent.data.tags.get("criterion.c4_human.json")
    human = json.loads(raw) if raw else None
    r = human.get("value") if human else None
    if when == "always":
        return Decision(True, "forced with --when always", r)
    if human is None:
        return Decision(
            False,
            "no human ratings have been imported for this run yet; run "
            "`make human-import` first, or force the panel with --when always",
            None,
        )
    if r is None:
        return Decision(
            False,
            f"the human correlation is not evaluable ({human.get('reason')}); "
            "import more ratings, or force the panel with --when always",
            None,
        )
    if r < panel_below:
        return Decision(
            True, f"human r = {r:.3f} < {panel_below}: the seed's trigger for Part C", r
        )
    return Decision(
        False,
        f"human r = {r:.3f} ≥ {panel_below}: the panel is not needed "
        "(use --when always to run it anyway)",
        r,
    )


def panel_samples(parent, results_dir: str | None = None) -> pd.DataFrame:
    """Every generation of the run, with human ratings merged in where they exist."""
    from experiments.human import load_generations

    records = load_generations(parent, results_dir)
    samples = pd.DataFrame(
        {
            "sample_id": [r["key"] for r in records],
            "concept": [r["concept_name"] for r in records],
            "text": [r["text"] for r in records],
            "delta": [float(r["delta"]) for r in records],
            "strength": [float(r["strength"]) for r in records],
        }
    )
    human = _human_ratings(parent)
    if human is not None:
        samples = samples.merge(human, on="sample_id", how="left")
    return samples


def _human_ratings(parent) -> pd.DataFrame | None:
    from experiments.human import CHILD_RUN_NAME as HUMAN_RUN
    from experiments.human import TABLE_NAME

    children = tracking.child_runs(parent.info.run_id, _experiment_name(parent))
    human = [c for c in children if c.info.run_name == HUMAN_RUN]
    if not human:
        return None
    import mlflow

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = mlflow.artifacts.download_artifacts(
                run_id=human[0].info.run_id, artifact_path=TABLE_NAME, dst_path=tmp
            )
        except Exception:
            return None
        data = json.loads(Path(path).read_text())
    table = pd.DataFrame(data["data"], columns=data["columns"])
    if not {"generation_key", "human_rating"} <= set(table.columns):
        return None
    return (
        table[["generation_key", "human_rating"]]
        .rename(columns={"generation_key": "sample_id"})
        .astype({"human_rating": float})
    )


def _experiment_name(run) -> str:
    return tracking.client().get_experiment(run.info.experiment_id).name


def _find_child(parent) -> str | None:
    children = tracking.child_runs(parent.info.run_id, _experiment_name(parent))
    for child in children:
        if child.info.run_name == CHILD_RUN_NAME:
            return child.info.run_id
    return None


def log_panel(parent, result, skipped: dict[str, str], criterion, budget: float | None) -> str:
    """One ``judge-panel`` child run per parent; a rerun updates it instead of adding one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = tracking.client()
    child = _find_child(parent)
    if child is None:
        child = tracking.start_run(
            _experiment_name(parent),
            CHILD_RUN_NAME,
            tags={"phase": CHILD_PHASE},
            parent_run_id=parent.info.run_id,
        )
        step = 1
    else:
        c.update_run(child, "RUNNING")
        step = int(c.get_run(child).data.tags.get("panel.runs", "0")) + 1
    try:
        c.set_tag(child, "panel.runs", str(step))
        c.set_tag(child, "panel.judges", ", ".join(result.judges))
        c.set_tag(child, "panel.skipped", json.dumps(skipped) if skipped else "none")
        c.set_tag(child, "criterion.c4_panel", criterion.status)
        if step == 1:
            params = {"judges": result.judges, "budget_usd": budget}
            for judge, desc in result.judge_params.items():
                params.update({f"judge.{judge}.{k}": v for k, v in desc.items()})
            tracking.log_params(child, params)
        metrics = dict(result.to_metrics())
        per_sample = result.per_sample.reset_index()
        metrics["panel_mean"] = float(per_sample["panel_mean"].mean())
        metrics["panel_median"] = float(per_sample["panel_median"].median())
        tracking.log_metrics(child, metrics, step=step)
        with tempfile.TemporaryDirectory() as tmp:
            for name, table in (
                ("judge_scores.json", result.scores),
                ("panel_per_sample.json", per_sample),
            ):
                path = Path(tmp) / name
                table.to_json(path, orient="split", index=False)
                c.log_artifact(child, str(path))
            summary = Path(tmp) / "panel_summary.json"
            summary.write_text(
                json.dumps(
                    {
                        "judges": result.judges,
                        "skipped": skipped,
                        "metrics": metrics,
                        "not_evaluable": result.not_evaluable(),
                        "criterion": criterion.to_dict(),
                    },
                    indent=1,
                )
            )
            c.log_artifact(child, str(summary))
        fig, ax = plt.subplots(figsize=(5.5, 4.5))
        ax.scatter(
            per_sample["delta"],
            per_sample["panel_mean"],
            c=per_sample.get("strength"),
            cmap="coolwarm",
        )
        ax.set(xlabel="Δ", ylabel="panel mean rating (0-10)", title="Judge panel against Δ")
        fig.tight_layout()
        c.log_figure(child, fig, "plots/panel_vs_delta.png")
        plt.close(fig)
        tracking.end_run(child)
    except BaseException:
        tracking.end_run(child, "FAILED")
        raise
    return child


def run_panel_for(
    run_id: str,
    when: Literal["auto", "always"],
    judges: list[str],
    budget: float | None,
    openai_base_url: str | None = None,
    results_dir: str | None = None,
    progress: bool = True,
    cache_dir: str | Path | None = None,
):
    """The whole Part C step: (decision, panel result, combined criterion 4, skipped judges)."""
    from experiments.human import phase5_parent
    from experiments.phase5 import record_criterion4
    from judges import build_panel, run_panel
    from metrics.criteria import panel_criterion

    parent = phase5_parent(run_id)
    params = parent.data.params
    decision = decide(parent, when, float(params.get("config.criteria.human_r_panel", 0.5)))
    if not decision.run:
        return decision, None, None, {}
    samples = panel_samples(parent, results_dir)
    options: dict[str, dict] = {j: {} for j in judges}
    for name in judges:
        if openai_base_url and name.startswith("openai/"):
            options[name]["base_url"] = openai_base_url
        if cache_dir is not None:
            options[name]["cache"] = str(cache_dir)
    built, skipped = build_panel(judges, options=options, budget_usd=budget)
    try:
        result = run_panel(built, samples, progress=progress)
    finally:
        for judge in built:
            judge.close()
    result.per_sample["strength"] = samples.set_index("sample_id")["strength"]
    criterion = panel_criterion(
        result.alpha,
        result.panel_mean_vs_delta,
        min_alpha=float(params.get("config.criteria.panel_alpha_min", 0.667)),
        min_r=float(params.get("config.criteria.panel_r_min", 0.7)),
    )
    log_panel(parent, result, skipped, criterion, budget)
    combined = record_criterion4(parent.info.run_id, panel=criterion, results_dir=results_dir)
    return decision, result, combined, skipped


def register(app: typer.Typer) -> None:
    from experiments.cli.common import console, friendly

    @app.command("panel")
    @friendly
    def panel(
        run: Annotated[str, typer.Option(help="the Phase 5 parent run id, or latest")] = "latest",
        when: Annotated[str, typer.Option(help="auto: only when human r < 0.5; always")] = "auto",
        judge: Annotated[
            list[str] | None,
            typer.Option(
                help="repeatable: anthropic/<model>, openai/<model>, llama/<path.gguf|embedded>"
            ),
        ] = None,
        budget: Annotated[float, typer.Option(help="USD cap for the API judges together")] = 5.0,
        openai_base_url: Annotated[
            str | None, typer.Option(help="an OpenAI-compatible server (vLLM, llama.cpp, Ollama)")
        ] = None,
        results_dir: Annotated[str | None, typer.Option(help="local results folder")] = None,
    ) -> None:
        """Part C: rate every generation with a judge panel when human r < 0.5."""
        from rich.table import Table

        if when not in ("auto", "always"):
            raise typer.BadParameter("--when must be auto or always")
        decision, result, combined, skipped = run_panel_for(
            run, when, list(judge or DEFAULT_JUDGES), budget, openai_base_url, results_dir
        )  # type: ignore[arg-type]
        console.print(f"panel {'runs' if decision.run else 'skipped'}: {decision.reason}")
        if result is None:
            return
        for name, reason in skipped.items():
            console.print(f"[yellow]skipped[/] {name}: {reason}")
        table = Table("judge", "r vs Δ", "r vs human", title="judge panel")
        for name in result.judges:
            rd, rh = result.judge_vs_delta.get(name), result.judge_vs_human.get(name)
            table.add_row(
                name,
                f"{rd.r:.3f}" if rd is not None and rd.evaluable else "n/a",
                f"{rh.r:.3f}" if rh is not None and rh.evaluable else "n/a",
            )
        console.print(table)
        metrics = result.to_metrics()
        console.print(
            f"Krippendorff α: {metrics.get('panel_alpha', 'n/a')}; "
            f"panel mean r vs Δ: {metrics.get('panel_mean_r_delta', 'n/a')}; "
            f"cost ${result.totals.get('cost_usd', 0):.4f}; "
            f"cache hits {int(result.totals.get('cache_hits', 0))}; "
            f"{result.wall_time_s:.1f} s"
        )
        console.print(f"criterion 4: [bold]{combined.status}[/] ({combined.reason})")
