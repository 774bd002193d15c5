"""Part C: the conditional multi-model judge panel.

The seed design runs the panel only when the human-vs-Δ correlation falls below
``criteria.human_r_panel`` (0.5); ``When.ALWAYS`` forces it. Every generation of the run
is rated by every judge that can run here (a judge without its API key is skipped, with
the reason logged), and a ``judge-panel`` child run under the Phase 5 parent records the
scores, agreement and validity. Criterion 4's "panel agrees" (α ≥ panel_alpha_min and
r(panel mean, Δ) > panel_r_min) is then recorded on the parent.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from experiments import tracking
from experiments.validation.criterion4 import record_criterion4, stored_verdict
from experiments.validation.human.importer import CHILD_PHASE as HUMAN_PHASE
from experiments.validation.human.importer import TABLE_NAME as HUMAN_TABLE
from experiments.validation.runs import Phase5Run, artifact_bytes, phase5_parent

if TYPE_CHECKING:
    import pandas as pd
    from mlflow.entities import Run

    from judges.panel import PanelResult
    from metrics.criteria import CriterionResult

DEFAULT_JUDGES = ("anthropic/claude-sonnet-4-5", "openai/gpt-4o-mini", "llama/embedded")
CHILD_RUN_NAME = "judge-panel"
CHILD_PHASE = "5C"


class When(StrEnum):
    """When the panel runs: ``auto`` only on the seed's trigger, ``always`` regardless."""

    AUTO = "auto"
    ALWAYS = "always"


@dataclass(frozen=True)
class Decision:
    run: bool
    reason: str
    human_r: float | None


def decide(parent: Run, when: When | str, panel_below: float = 0.5) -> Decision:
    """Whether the panel should run, and why: the seed's trigger is human r < panel_below.

    ``parent`` is the MLflow parent run (only its tags are read).
    """
    from metrics.criteria import C4_HUMAN

    human = stored_verdict(parent.data.tags, C4_HUMAN)
    r = human.value if human else None
    if When(when) is When.ALWAYS:
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
            f"the human correlation is not evaluable ({human.reason}); "
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


def panel_samples(parent: Phase5Run) -> pd.DataFrame:
    """Every generation of the run, with human ratings merged in where they exist."""
    import pandas as pd

    records = parent.scored_generations()
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


def _human_ratings(parent: Phase5Run) -> pd.DataFrame | None:
    """The latest imported human ratings, keyed by generation (None when there are none)."""
    import pandas as pd

    child = parent.find_child(HUMAN_PHASE)
    data = artifact_bytes(child, HUMAN_TABLE) if child is not None else None
    if data is None:
        return None
    split = json.loads(data)
    table = pd.DataFrame(split["data"], columns=split["columns"])
    if not {"generation_key", "human_rating"} <= set(table.columns):
        return None
    return (
        table[["generation_key", "human_rating"]]
        .rename(columns={"generation_key": "sample_id"})
        .astype({"human_rating": float})
    )


def log_panel(
    parent: Phase5Run,
    result: PanelResult,
    skipped: dict[str, str],
    criterion: CriterionResult,
    budget: float | None,
) -> str:
    """One ``judge-panel`` child run per parent; a rerun updates it instead of adding one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    child = parent.find_child(CHILD_PHASE)
    step = 1
    if child is not None:
        step = int(tracking.get_run(child).data.tags.get("panel.runs", "0")) + 1
    with tracking.tracked_run(
        parent.experiment,
        CHILD_RUN_NAME,
        tags={"phase": CHILD_PHASE},
        parent_run_id=parent.run_id,
        run_id=child,
    ) as child:
        c = tracking.client()
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
        try:
            ax.scatter(
                per_sample["delta"],
                per_sample["panel_mean"],
                c=per_sample.get("strength"),
                cmap="coolwarm",
            )
            ax.set(xlabel="Δ", ylabel="panel mean rating (0-10)", title="Judge panel against Δ")
            fig.tight_layout()
            c.log_figure(child, fig, "plots/panel_vs_delta.png")
        finally:
            plt.close(fig)
    return child


class PanelOutcome(NamedTuple):
    """What one ``panel`` step did: the decision and, when the panel ran, the rest."""

    decision: Decision
    result: PanelResult | None  # None when the panel did not run
    combined: CriterionResult | None  # criterion 4 after recording the panel's verdict
    skipped: dict[str, str]  # judges that could not run here, and why


def run_panel_for(
    run_id: str,
    when: When | str,
    judges: list[str],
    budget: float | None,
    openai_base_url: str | None = None,
    results_dir: str | Path | None = None,
    progress: bool = True,
    cache_dir: str | Path | None = None,
    experiment: str | None = None,
) -> PanelOutcome:
    """The whole Part C step for one run (``latest``: the newest in ``experiment``)."""
    from judges import build_panel, run_panel
    from metrics.criteria import panel_criterion

    parent = phase5_parent(run_id, experiment, results_dir)
    thresholds = parent.criteria
    decision = decide(parent.run, when, thresholds.human_r_panel)
    if not decision.run:
        return PanelOutcome(decision, None, None, {})
    samples = panel_samples(parent)
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
        min_alpha=thresholds.panel_alpha_min,
        min_r=thresholds.panel_r_min,
    )
    log_panel(parent, result, skipped, criterion, budget)
    combined = record_criterion4(parent.run_id, panel=criterion, folder=parent.folder)
    return PanelOutcome(decision, result, combined, skipped)
