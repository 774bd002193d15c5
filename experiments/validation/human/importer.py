"""Import rated samples: validate, correlate with Δ, log, and record criterion 4.

Everything is validated and computed before anything is written, so a bad file changes
nothing (no files, no MLflow). One ``human-validation`` child run per parent is reused:
each import is one metric step (the latest is current, earlier ones are history) and
the ratings table is replaced, so re-importing a corrected file replaces the figures.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.kernel.publisher import ChildUpdate
from experiments.rundir import atomic_write_text
from experiments.tracking.datasets import log_dataset
from experiments.validation.criterion4 import record_criterion4
from experiments.validation.errors import ValidationInputError
from experiments.validation.human.answer_key import key_samples
from experiments.validation.human.export import answer_key_for
from experiments.validation.human.ratings import RatedSample, guess_is_correct, parse_ratings
from experiments.validation.runs import Phase5Run, phase5_parent

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from metrics.criteria import CriterionResult
    from metrics.stats import Correlation, NotEvaluable

RESULT_NAME = "human_validation_result.json"
PLOT_NAME = "human_vs_delta.png"
TABLE_NAME = "human_ratings.json"
CHILD_RUN_NAME = "human-validation"
CHILD_PHASE = "5B"
DEFAULT_MIN_RATED = 20


@dataclass
class ImportResult:
    run_id: str
    child_run_id: str
    n_samples: int
    n_rated: int
    pearson: Correlation | NotEvaluable
    spearman: Correlation | NotEvaluable
    guess_accuracy: float | None
    n_guessed: int
    criterion: CriterionResult
    combined: CriterionResult
    warnings: list[str]
    table: pd.DataFrame  # the rated samples
    plot_path: Path | None = None
    trace_feedback: dict[str, int] = dataclasses.field(default_factory=dict)


def import_ratings(
    csv_path: str | Path,
    run_id: str,
    key_path: str | Path | None = None,
    min_rated: int = DEFAULT_MIN_RATED,
    results_dir: str | Path | None = None,
    experiment: str | None = None,
    rater: str | None = None,
) -> ImportResult:
    """Validate a ratings CSV, correlate with Δ, log to the ``human-validation`` child run
    and update criterion 4 on the parent. Any invalid input raises before anything is
    written. Each rating is also attached to its generation's trace as HUMAN feedback
    from ``rater`` (default: the user running the import)."""
    from metrics.criteria import human_criterion, human_criterion_v2
    from metrics.stats import clustered_pearson, spearman

    csv_path = Path(csv_path)
    if not csv_path.is_file():
        raise ValidationInputError(f"{csv_path}: no such file")
    parent = phase5_parent(run_id, experiment, results_dir)
    key = answer_key_for(parent, csv_path, Path(key_path) if key_path is not None else None)
    parsed = parse_ratings(csv_path, key)
    if parsed.problems:
        raise ValidationInputError(
            f"{csv_path}: {len(parsed.problems)} problem(s); nothing was imported:\n"
            + "\n".join(f"  - {p}" for p in parsed.problems)
        )
    samples = key_samples(key)
    rated = [r for r in parsed.rows.values() if r.rating is not None]
    warnings = list(parsed.warnings)
    if len(rated) < len(samples):
        warnings.append(f"only {len(rated)} of {len(samples)} samples are rated (partial ratings)")
    if len(rated) < min_rated:
        raise ValidationInputError(
            f"{csv_path}: {len(rated)} sample(s) rated; at least {min_rated} are needed to "
            "compute r (--min-rated); nothing was imported"
        )
    table = rating_table(rated, key)
    # Rows of one concept share its direction, centroids and prompts: resample concepts.
    corr = clustered_pearson(
        table["human_rating"].astype(float), table["delta"].astype(float), list(table["concept"])
    )
    rho = spearman(table["human_rating"].astype(float), table["delta"].astype(float))
    guessed = table[table["topic_guess"] != ""]
    n_guessed = len(guessed)
    accuracy = float(guessed["guess_correct"].astype(bool).mean()) if n_guessed else None
    thresholds = parent.criteria  # from the run's stored config: may refuse, still unwritten
    crit = human_criterion(corr, pass_r=thresholds.human_r_pass, panel_r=thresholds.human_r_panel)
    crit_v2 = human_criterion_v2(corr, pass_r=thresholds.human_r_pass)
    rated_note = f"; n = {len(table)} of {len(samples)} samples rated"
    crit, crit_v2 = (dataclasses.replace(c, reason=c.reason + rated_note) for c in (crit, crit_v2))
    summary: dict[str, Any] = {
        "run_id": parent.run_id,
        "child_run_id": None,  # filled in when logged
        "import": None,
        "csv": str(csv_path),
        "key_hash": key["key_hash"],
        "n_samples": len(samples),
        "n_rated": len(table),
        "pearson": corr.to_dict(),
        "spearman": rho.to_dict(),
        "guess_accuracy": accuracy,
        "n_guessed": n_guessed,
        "criterion": crit.to_dict(),
        "criterion_v2": crit_v2.to_dict(),
        "warnings": warnings,
    }
    fig = scatter_plot(table, corr)

    # ---- everything validated and computed: now write.
    import matplotlib.pyplot as plt

    try:
        child = _log_import(
            parent, csv_path, key, min_rated, table, (corr, rho), crit, summary, fig
        )
        combined = record_criterion4(
            parent.run_id, human=crit, human_v2=crit_v2, folder=parent.folder
        )
        summary["trace_feedback"] = attach_human_feedback(
            parent, table, rater or default_rater(), summary["import"]
        )
        local = parent.folder.human
        plot_path = None
        if local.exists():
            summary["criterion4"] = combined.to_dict()
            atomic_write_text(local / RESULT_NAME, json.dumps(summary, indent=1) + "\n")
            plot_path = local / PLOT_NAME
            fig.savefig(plot_path, dpi=110)
    finally:
        plt.close(fig)
    return ImportResult(
        parent.run_id,
        child,
        len(samples),
        len(table),
        corr,
        rho,
        accuracy,
        n_guessed,
        crit,
        combined,
        warnings,
        table,
        plot_path,
        summary.get("trace_feedback", {}),
    )


def rating_table(rated: list[RatedSample], key: dict[str, Any]) -> pd.DataFrame:
    """One row per rated sample, joined with the answer key (concept, strength, Δ)."""
    import pandas as pd

    samples = key_samples(key)
    rows = []
    for r in sorted(rated, key=lambda r: r.sample_id):
        s = samples[r.sample_id]
        concept = key["concepts"].get(s["concept"], {"name": s["concept_name"], "lemmas": []})
        rows.append(
            {
                "sample_id": r.sample_id,
                "concept": s["concept"],
                "concept_name": s["concept_name"],
                "strength": s["strength"],
                "delta": s["delta"],
                "human_rating": r.rating,
                "topic_guess": r.guess,
                "guess_correct": (
                    guess_is_correct(r.guess, concept["name"], concept["lemmas"])
                    if r.guess
                    else None
                ),
                "child_run_id": s["child_run_id"],
                "generation_key": s["generation_key"],
                "text": r.text,
            }
        )
    return pd.DataFrame(rows)


def _log_import(
    parent: Phase5Run,
    csv_path: Path,
    key: dict[str, Any],
    min_rated: int,
    table: pd.DataFrame,
    correlations: tuple[Correlation | NotEvaluable, Correlation | NotEvaluable],
    crit: CriterionResult,
    summary: dict[str, Any],
    fig: Figure,
) -> str:
    """Log one import to the run's ``human-validation`` child (created on first import)."""
    from metrics.stats import Correlation

    corr, rho = correlations
    tags = {
        "human.csv_sha256": hashlib.sha256(csv_path.read_bytes()).hexdigest(),
        "human.key_hash": key["key_hash"],
        "human.min_rated": str(min_rated),
        "human.evaluable": str(corr.evaluable).lower(),
        "criterion.c4_human": crit.status,
    }
    metrics: dict[str, float | None] = {
        "n_samples": float(summary["n_samples"]),
        "n_rated": float(summary["n_rated"]),
        "n_guessed": float(summary["n_guessed"]),
        "guess_accuracy": summary["guess_accuracy"],
        "human_r_evaluable": 1.0 if corr.evaluable else 0.0,
    }
    for name, stat, fields in (
        ("human_r", corr, ("p_value", "ci_low", "ci_high")),
        ("human_spearman", rho, ("ci_low", "ci_high")),
    ):
        if isinstance(stat, Correlation):  # r, then its p value (Pearson's) and interval
            metrics[name] = stat.r
            metrics.update({f"{name}_{field}": getattr(stat, field) for field in fields})

    def build(child: str, imports: int) -> ChildUpdate:
        # one step per import: the latest step is the current figure, earlier ones history
        summary.update({"child_run_id": child, "import": imports})
        return ChildUpdate(
            tags=tags,
            metrics=metrics,
            tables={TABLE_NAME: table},
            figures={f"plots/{PLOT_NAME}": fig},
            files={RESULT_NAME: json.dumps(summary, indent=1)},
            after=lambda run: log_dataset(run, table, "human-ratings", csv_path, "ratings"),
            note=import_note(summary, crit),
            note_whole=RESULT_NAME,
        )

    return parent.update_child(CHILD_PHASE, CHILD_RUN_NAME, "human.imports", build)


def default_rater() -> str:
    """The rater id when none is given: the user running the import."""
    import getpass

    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown-rater"


def attach_human_feedback(
    parent: Phase5Run, table: pd.DataFrame, rater: str, imports: int | None
) -> dict[str, int]:
    """Every rating as HUMAN feedback (source: the rater) on its generation's trace.

    Runs made without traces (``tracking.traces: false``) get none; ratings whose
    generation has no trace are counted as ``untraced``.
    """
    from experiments.tracking.traces import RELATEDNESS, Feedback

    columns = ("generation_key", "human_rating", "topic_guess", "sample_id", "guess_correct")
    keyed = [
        (
            key,
            Feedback(
                RELATEDNESS,
                float(rating),
                rationale=f"topic guess: {guess}" if guess else None,
                metadata={
                    "sample_id": sample_id,
                    "guess_correct": correct,
                    "import": imports,
                    "scale": "0-10",
                },
            ),
        )
        for key, rating, guess, sample_id, correct in zip(*(table[c] for c in columns), strict=True)
    ]
    return parent.attach_feedback(keyed, "HUMAN", rater)


def import_note(summary: dict[str, Any], crit: CriterionResult) -> str:
    """The child run's description: the correlation and the verdict in a few lines."""

    def stat(name: str, d: dict[str, Any]) -> str:
        if d.get("r") is None:
            return f"{name}: not evaluable ({d.get('reason', '')})"
        return f"{name} = {d['r']:.3f}, 95% CI [{d['ci_low']:.3f}, {d['ci_high']:.3f}]"

    return (
        f"# Human validation of Δ (import {summary['import']})\n\n"
        f"- {summary['n_rated']} of {summary['n_samples']} blind samples rated\n"
        f"- {stat('Pearson r', summary['pearson'])}\n"
        f"- {stat('Spearman ρ', summary['spearman'])}\n"
        f"- criterion {crit.key}: **{crit.status}** ({crit.reason})\n\n"
        "Each rating is HUMAN feedback (`relatedness`, source: the rater) on its "
        "generation's trace in the parent run's Traces tab.\n"
    )


def scatter_plot(table: pd.DataFrame, correlation: Correlation | NotEvaluable) -> Figure:
    """Human rating against Δ, one colour per steering strength."""
    import matplotlib

    from metrics.stats import Correlation

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    strengths = sorted(table["strength"].unique())
    cmap = plt.get_cmap("coolwarm", max(len(strengths), 2))
    for i, s in enumerate(strengths):
        part = table[table["strength"] == s]
        ax.scatter(
            part["delta"],
            part["human_rating"],
            color=cmap(i),
            label=f"s = {s:+g}",
            alpha=0.8,
            edgecolor="black",
            linewidth=0.4,
        )
    title = "Human rating against Δ"
    if isinstance(correlation, Correlation):
        title += (
            f"\nPearson r = {correlation.r:.2f}, 95% CI [{correlation.ci_low:.2f}, "
            f"{correlation.ci_high:.2f}], n = {correlation.n}"
        )
    ax.set(xlabel="Δ = cos(core) − cos(neg)", ylabel="human rating (0-10)", title=title)
    ax.set_ylim(-0.5, 10.5)
    ax.legend(title="strength", fontsize=8)
    fig.tight_layout()
    return fig
