"""Part C: the conditional multi-model judge panel.

The seed design runs the panel only when the human-vs-Δ correlation falls below
``criteria.human_r_panel`` (0.5); ``When.ALWAYS`` forces it. Every generation of the run
is rated by every judge that can run here (a judge without its API key is skipped, with
the reason logged), and a ``judge-panel`` child run under the Phase 5 parent records the
scores, agreement and validity. Criterion 4's "panel agrees" (α ≥ panel_alpha_min and
r(panel mean, Δ) > panel_r_min) is then recorded on the parent.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from experiments.kernel.publisher import ChildUpdate
from experiments.tracking.prompts import RubricPrompt, register_rubric
from experiments.validation.criterion4 import record_criterion4, stored_verdict
from experiments.validation.human.importer import CHILD_PHASE as HUMAN_PHASE
from experiments.validation.human.importer import TABLE_NAME as HUMAN_TABLE
from experiments.validation.runs import Phase5Run, artifact_bytes, phase5_parent
from metrics.stats import Alpha, Correlation, NotEvaluable

if TYPE_CHECKING:
    import pandas as pd
    from mlflow.entities import Run

    from judges.estimate import PanelEstimate
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
            "sample_id": [r.key for r in records],
            "concept": [r.concept_name for r in records],
            "text": [r.text for r in records],
            "delta": [r.delta for r in records],
            "strength": [r.strength for r in records],
            # The instruction each text continues (the axbench rubric shows it) and what
            # pairs a steered text with its unsteered twin (0 in a first-release run).
            "prompt": [r.prompt for r in records],
            "synset": [r.concept for r in records],
            "arm": [r.arm for r in records],
            "prompt_index": [r.prompt_index or 0 for r in records],
            "sample": [r.sample or 0 for r in records],
            "split": [r.split for r in records],
            # the direction a text was steered along (identify runs; "" otherwise)
            "vectors": [r.vectors or "" for r in records],
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
    # as tracking.overwrite_table and log_table write it, read with nothing converted
    table = pd.read_json(io.BytesIO(data), orient="split", dtype=False, precise_float=True)
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

    from judges.base import Rubric

    per_sample = result.per_sample.reset_index()
    metrics = {
        **result.to_metrics(),
        "panel_mean": float(per_sample["panel_mean"].mean()),
        "panel_median": float(per_sample["panel_median"].median()),
    }
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ax.scatter(
        per_sample["delta"], per_sample["panel_mean"], c=per_sample.get("strength"),
        cmap="coolwarm",
    )  # fmt: skip
    ax.set(xlabel="Δ", ylabel="panel mean rating (0-10)", title="Judge panel against Δ")
    fig.tight_layout()

    def build(_child: str, _step: int) -> ChildUpdate:
        rubric = register_rubric(Rubric())
        feedback = attach_judge_feedback(parent, result.scores, rubric)
        params: dict[str, object] = {"judges": result.judges, "budget_usd": budget}
        for judge, desc in result.judge_params.items():
            params.update({f"judge.{judge}.{k}": v for k, v in desc.items()})
        summary = {
            "judges": result.judges,
            "skipped": skipped,
            "metrics": metrics,
            "not_evaluable": result.not_evaluable(),
            "criterion": criterion.to_dict(),
            "rubric_prompt": rubric.uri,
            "trace_feedback": feedback,
        }
        return ChildUpdate(
            tags={
                "panel.judges": ", ".join(result.judges),
                "panel.skipped": json.dumps(skipped) if skipped else "none",
                "criterion.c4_panel": criterion.status,
                "panel.rubric_prompt": rubric.uri,
                "panel.trace_feedback": json.dumps(feedback),
            },
            first_params=params,
            params={"rubric_version": rubric.rubric_version},
            metrics=metrics,
            prompts=[rubric.uri],
            # MLflow tables: the UI shows them in the artefact view and the Evaluation tab.
            tables={"judge_scores.json": result.scores, "panel_per_sample.json": per_sample},
            figures={"plots/panel_vs_delta.png": fig},
            files={"panel_summary.json": json.dumps(summary, indent=1)},
            note=panel_note(result, skipped, criterion, rubric),
        )

    try:
        child = parent.update_child(CHILD_PHASE, CHILD_RUN_NAME, "panel.runs", build)
    finally:
        plt.close(fig)
    return child


def cell_text(value: object) -> str:
    """A text cell of the judge-score table: "" where it is missing (None, or the NaN
    pandas reads an empty string cell as), never the word "nan"."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def attach_judge_feedback(
    parent: Phase5Run, scores: pd.DataFrame, rubric: RubricPrompt
) -> dict[str, int]:
    """Every judge score as LLM_JUDGE feedback (source: the judge's name) on the trace of
    the generation it rates, with the rubric version and its registry URI; an abstention
    is feedback with an error and no value."""
    from experiments.tracking.traces import RELATEDNESS, Feedback

    keyed = []
    rows = scores[["sample_id", "judge", "score", "raw", "model", "cost", "cache_hit", "error"]]
    for sample_id, judge, score, raw, model, cost, cache_hit, error in rows.itertuples(index=False):
        abstained = score is None or score != score  # NaN in the table
        feedback = Feedback(
            RELATEDNESS,
            None if abstained else float(score),
            rationale=cell_text(raw) or None,
            metadata={
                "judge": judge,
                "model": cell_text(model),
                "rubric_version": rubric.rubric_version,
                "rubric_prompt": rubric.uri,
                "cost_usd": cost,
                "cache_hit": bool(cache_hit),
                "scale": "0-10",
            },
            error=(cell_text(error) or "the judge abstained") if abstained else None,
        )
        keyed.append((sample_id, feedback))
    return parent.attach_feedback(keyed, "LLM_JUDGE", lambda fb: str(fb.metadata["judge"]))


def _shown(stat: Alpha | Correlation | NotEvaluable) -> float | str:
    """A statistic as the note shows it (its metric's number): n/a when not evaluable."""
    if isinstance(stat, NotEvaluable):
        return "n/a"
    value = stat.value if isinstance(stat, Alpha) else stat.r
    return value if math.isfinite(value) else "n/a"


def panel_note(
    result: PanelResult, skipped: dict[str, str], criterion: CriterionResult, rubric: RubricPrompt
) -> str:
    """The panel child run's description: who judged, how they agree, what it cost."""
    lines = [
        "# Judge panel (Part C)",
        "",
        f"- judges: {', '.join(result.judges)}"
        + (f"; skipped: {', '.join(skipped)}" if skipped else ""),
        f"- rubric `{rubric.rubric_version}` ({rubric.uri})",
        f"- Krippendorff α: {_shown(result.alpha)}; "
        f"panel mean r vs Δ: {_shown(result.panel_mean_vs_delta)}",
        f"- criterion {criterion.key}: **{criterion.status}** ({criterion.reason})",
        f"- cost ${result.totals.get('cost_usd', 0):.4f}, "
        f"{int(result.totals.get('ratings', 0))} ratings, "
        f"{int(result.totals.get('cache_hits', 0))} from the cache",
        "",
        "Each score is LLM_JUDGE feedback (`relatedness`, source: the judge) on its "
        "generation's trace in the parent run's Traces tab.",
    ]
    return "\n".join(lines) + "\n"


class PanelOutcome(NamedTuple):
    """What one ``panel`` step did: the decision and, when the panel ran, the rest."""

    decision: Decision
    result: PanelResult | None  # None when the panel did not run
    combined: CriterionResult | None  # criterion 4 after recording the panel's verdict
    skipped: dict[str, str]  # judges that could not run here, and why


def _judge_options(
    judges: list[str], openai_base_url: str | None, cache_dir: str | Path | None
) -> dict[str, dict[str, str]]:
    """Each judge's own options: the OpenAI-compatible server (``openai/`` judges), the
    rating cache (every judge)."""
    server = {"base_url": openai_base_url} if openai_base_url else {}
    cache = {"cache": str(cache_dir)} if cache_dir is not None else {}
    return {j: {**(server if j.startswith("openai/") else {}), **cache} for j in judges}


def rate_run(
    parent: Phase5Run,
    judges: list[str],
    budget: float | None,
    openai_base_url: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    cache_dir: str | Path | None = None,
    limit: int | None = None,
    rubric: str = "relatedness",
) -> tuple[pd.DataFrame, PanelResult, dict[str, str]]:
    """Every generation of ``parent`` rated by every judge that can run here under
    ``rubric`` (``judges.RUBRICS``): the samples, the panel's result, the skipped judges."""
    from judges import RUBRICS, build_panel, run_panel

    samples = panel_samples(parent)
    options = _judge_options(judges, openai_base_url, cache_dir)
    built, skipped = build_panel(judges, options=options, budget_usd=budget)
    try:
        result = run_panel(built, samples, RUBRICS[rubric], progress=progress, limit=limit)
    finally:
        for judge in built:
            judge.close()
    result.per_sample["strength"] = samples.set_index("sample_id")["strength"]
    return samples, result, skipped


def run_panel_for(
    run_id: str,
    when: When | str,
    judges: list[str],
    budget: float | None,
    openai_base_url: str | None = None,
    results_dir: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    cache_dir: str | Path | None = None,
    experiment: str | None = None,
    limit: int | None = None,
) -> PanelOutcome:
    """The whole Part C step for one run (``latest``: the newest in ``experiment``).

    ``limit`` rates only the first N generations (by key), e.g. to try the judges on a
    few before paying for all of them.
    """
    from metrics.criteria import panel_criterion, panel_criterion_v2

    parent = phase5_parent(run_id, experiment, results_dir)
    thresholds = parent.criteria
    decision = decide(parent.run, when, thresholds.human_r_panel)
    if not decision.run:
        return PanelOutcome(decision, None, None, {})
    _samples, result, skipped = rate_run(
        parent, judges, budget, openai_base_url, progress, cache_dir, limit
    )
    criterion, criterion_v2 = (
        rule(result.alpha, result.panel_mean_vs_delta,
             min_alpha=thresholds.panel_alpha_min, min_r=thresholds.panel_r_min)
        for rule in (panel_criterion, panel_criterion_v2)
    )  # fmt: skip
    log_panel(parent, result, skipped, criterion, budget)
    combined = record_criterion4(
        parent.run_id, panel=criterion, panel_v2=criterion_v2, folder=parent.folder
    )
    return PanelOutcome(decision, result, combined, skipped)


def estimate_panel_for(
    run_id: str,
    when: When | str,
    judges: list[str],
    openai_base_url: str | None = None,
    results_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    experiment: str | None = None,
    limit: int | None = None,
    rubric: str = "relatedness",
) -> tuple[Decision, PanelEstimate | None]:
    """A dry run of :func:`run_panel_for`: the calls each judge would make (cache hits
    left out) and the worst-case cost from the price table, for an API judge without its
    key too (``missing_key`` on its estimate). Nothing is sent or logged."""
    from experiments.validation.runs import IDENTIFY_PHASE, PHASE
    from judges import RUBRICS, estimate_panel

    phases = (PHASE, IDENTIFY_PHASE) if rubric == "axbench" else (PHASE,)
    parent = phase5_parent(run_id, experiment, results_dir, phases)
    decision = decide(parent.run, when, parent.criteria.human_r_panel)
    if not decision.run:
        return decision, None
    options = _judge_options(judges, openai_base_url, cache_dir)
    samples = panel_samples(parent)
    return decision, estimate_panel(judges, samples, RUBRICS[rubric], limit=limit, options=options)
