"""Figures of the identification study (matplotlib, Agg)."""

from __future__ import annotations

import math
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from experiments.identify.estimation.cells import StudyTables
from metrics.intervals import Interval

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from experiments.record import IdentifyRecord, ManipulationResult
    from experiments.record.pooled import ExploratoryRecord


def _plt() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _subplots(*args: Any, **kw: Any) -> tuple[Figure, Any]:
    """``plt.subplots`` on the Agg backend, its figure typed."""
    fig, axes = _plt().subplots(*args, **kw)
    return fig, axes


def _colours(names: list[str]) -> dict[str, object]:
    cmap = _plt().get_cmap("tab10")
    return {m: cmap(i % 10) for i, m in enumerate(names)}


def trajectories(tables: StudyTables) -> Figure:
    """Per concept: AUROC against the effect along every manipulation, one colour each."""
    names = tables.manipulations()
    colours = _colours(names)
    concepts = sorted(tables.directions["concept"].unique())
    cols = min(5, len(concepts))
    rows = math.ceil(len(concepts) / cols)
    fig, axes = _subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, sharey=False)
    for ax, concept in zip(axes.flat, concepts, strict=False):
        for m in names:
            curve = tables.curve(m)
            part = curve[curve["concept"] == concept].sort_values("level")
            if part["level"].duplicated().any():  # several draws per level (seeds)
                part = part.groupby("level")[["auroc", "effect"]].mean().reset_index()
            ax.plot(
                part["auroc"], part["effect"], marker="o", ms=2.5, lw=1, color=colours[m], label=m
            )
        ax.set_title(concept, fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(concepts) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(len(names), 7), fontsize=7)
    fig.supxlabel("AUROC of the direction as its own detector", fontsize=8)
    fig.supylabel("likelihood effect (nats/token)", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / rows))
    return fig


def slopes_figure(record: IdentifyRecord) -> Figure:
    rows: list[tuple[str, str, Interval | None]] = []
    for m, r in record.manipulations.items():
        rows.append((m, "AUROC alone", r.slope_auroc))
        rows.append((m, "AUROC | cos(v, v*)", r.partial.auroc))
    rows.append(("pooled", "AUROC alone", record.pooled.slope_auroc))
    rows.append(("pooled", "AUROC | cos(v, v*)", record.pooled.partial.auroc))
    fig, ax = _subplots(figsize=(7, 0.45 + 0.32 * len(rows)))
    for i, (_m, kind, iv) in enumerate(rows):
        if iv is None or iv.estimate is None:
            continue
        colour = "C0" if kind == "AUROC alone" else "C3"
        if iv.low is not None and iv.high is not None:
            ax.plot([iv.low, iv.high], [i, i], color=colour, lw=1.5)
        ax.plot([iv.estimate], [i], "o", color=colour)
    ax.set_yticks(range(len(rows)), [f"{m} · {k}" for m, k, _ in rows], fontsize=7)
    ax.axvline(0, color="black", lw=0.5)
    ax.set_xlabel("within-concept slope of the effect on AUROC (95% concept-bootstrap CI)")
    fig.tight_layout()
    return fig


def estimands_figure(record: IdentifyRecord) -> Figure:
    """Every estimand's slope with its interval, one row each (the primary's estimand
    first and marked), the smallest effect of interest shaded where one is registered;
    an estimand without an estimate is listed with why, not drawn at 0."""
    primary = record.primary.spec.estimand if record.primary is not None else None
    names = sorted(record.estimands, key=lambda n: n != primary)
    fig, ax = _subplots(figsize=(8, 0.6 + 0.4 * len(names)))
    margin = record.primary.spec.equivalence_margin if record.primary else None
    if isinstance(margin, int | float):
        ax.axvspan(-margin, margin, color="grey", alpha=0.15, label=f"±{margin:g} (margin)")
    labels = []
    for i, name in enumerate(names):
        e = record.estimands[name]
        fit = e.fit
        if fit is None or fit.estimate is None:
            labels.append(f"{name}: {e.status.replace('_', ' ')}")
            continue
        colour = "C3" if name == primary else "C0"
        if fit.low is not None and fit.high is not None:
            ax.plot([fit.low, fit.high], [i, i], color=colour, lw=1.8)
        ax.plot([fit.estimate], [i], "o", color=colour)
        labels.append(f"{name} (primary)" if name == primary else name)
    ax.set_yticks(range(len(names)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="black", lw=0.5)
    ax.set_xlabel("slope of the likelihood effect on AUROC (nats/token per unit AUROC, 95% CI)")
    if isinstance(margin, int | float):
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def dose_figure(tables: StudyTables, record: IdentifyRecord) -> Figure:
    names = list(record.manipulations)
    colours = _colours(names)
    fig, (left, right) = _subplots(1, 2, figsize=(11, 4))
    mean = record.baseline.mean
    for m in names:
        frame = tables.curve(m)
        left.scatter(
            frame["auroc"], frame["effect_above_null"], s=5, alpha=0.4, color=colours[m], label=m
        )
        reached = [r for r in record.manipulations[m].threshold_curve or [] if r.level is not None]
        xs, ys = [r.fraction for r in reached], [r.level for r in reached]
        right.plot(xs, ys, marker="o", ms=3, color=colours[m], label=m)
    if mean is not None:
        for f in (0.5, 1.0):
            left.axhline(f * mean, color="grey", ls=":", lw=1)
    left.set(xlabel="AUROC", ylabel="effect above null (nats/token)", title="effect against AUROC")
    right.set(
        xlabel="target: fraction of the prompting baseline's effect",
        ylabel="minimum effective AUROC (point; censored points omitted)",
        title="minimum effective AUROC over targets",
    )
    left.legend(fontsize=6)
    fig.tight_layout()
    return fig


def predictors_figure(record: IdentifyRecord) -> Figure:
    table = record.pooled.predictors
    names = list(table)
    fig, ax = _subplots(figsize=(6, 0.6 + 0.4 * len(names)))
    for i, p in enumerate(names):
        for offset, iv, colour, key in (
            (-0.12, table[p].observed, "C0", "observed"),
            (0.12, table[p].corrected, "C3", "corrected"),
        ):
            if iv.estimate is None:
                continue
            if iv.low is not None and iv.high is not None:
                ax.plot([iv.low, iv.high], [i + offset] * 2, color=colour)
            ax.plot([iv.estimate], [i + offset], "o", color=colour, label=key if i == 0 else None)
    ax.set_yticks(range(len(names)), names)
    ax.axvline(0, color="black", lw=0.5)
    ax.set_xlabel("within-concept r with the effect (observed, disattenuated; 95% CI)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def validation_figure(tables: StudyTables, cells: pd.DataFrame) -> Figure:
    from experiments.identify.estimation.crosscheck import canonical

    gen = cells[cells["sign"] == 1].copy()
    gen["direction"] = gen["direction"].map(
        lambda d: d if d in ("null", "prompt") else canonical(d)
    )
    frame = gen.merge(tables.directions, on=["concept", "direction"], how="inner")
    fig, ax = _subplots(figsize=(5, 4))
    for d, g in frame.groupby("direction"):
        ax.scatter(g["effect"], g["e_gen"], s=10, label=d)
    ax.set(xlabel="likelihood effect (nats/token)", ylabel="generation effect (gated Δ)")
    ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def manipulation_figure(m: str, frame: pd.DataFrame, result: ManipulationResult) -> Figure:
    """One manipulation's curve: AUROC and the effect against its level (means, CIs)."""
    fig, (a, b) = _subplots(1, 2, figsize=(9, 3.4))
    for ax, column in ((a, "auroc"), (b, "effect")):
        for _, group in frame.groupby("concept"):
            g = group.groupby("level")[column].mean()
            ax.plot(g.index, g.values, color="grey", alpha=0.25, lw=0.8)
        measured = [(row.level, getattr(row, column) or Interval()) for row in result.curve]
        levels = [level for level, _ in measured]
        ax.plot(levels, [i.estimate for _, i in measured], marker="o", color="C3")
        if any(i.low is not None for _, i in measured):
            lows = [np.nan if i.low is None else i.low for _, i in measured]
            highs = [np.nan if i.high is None else i.high for _, i in measured]
            ax.fill_between(levels, lows, highs, alpha=0.2, color="C3")
        ax.set(xlabel="level", ylabel=column, title=f"{m}: {column}")
    fig.tight_layout()
    return fig


def figures(
    tables: StudyTables, record: IdentifyRecord, validation_cells: pd.DataFrame
) -> dict[str, Figure]:
    """The parent run's figures, drawn from the typed record and the tables."""
    out = {
        "trajectories.png": trajectories(tables),
        "slopes.png": slopes_figure(record),
        "dose_response.png": dose_figure(tables, record),
        "predictors.png": predictors_figure(record),
    }
    if record.estimands:
        out["estimands.png"] = estimands_figure(record)
    if len(validation_cells) and np.any(validation_cells["sign"] == 1):
        out["validation.png"] = validation_figure(tables, validation_cells)
    return out


def pooled_figure(
    frame: pd.DataFrame, per_concept: pd.DataFrame, record: ExploratoryRecord
) -> Figure:
    """The pooled held-out shards (``identify pool --exploratory``): left, each family's mean
    AUROC and likelihood effect over the built directions, each concept's own directions
    faint behind (centred on the concept's mean, then moved to the pool's); right, the
    concepts' own slopes, the scored primary's estimate and interval over them."""
    from experiments.identify.estimation.variance import practitioner_rows

    fig, (left, right) = _subplots(1, 2, figsize=(11, 4.2))
    rows = practitioner_rows(frame)
    centred = rows.assign(
        x=rows["auroc"] - rows.groupby("concept")["auroc"].transform("mean") + rows["auroc"].mean(),
        y=rows["effect"]
        - rows.groupby("concept")["effect"].transform("mean")
        + rows["effect"].mean(),
    )
    colours = _colours(sorted(centred["manipulation"].unique()))
    for m, part in centred.groupby("manipulation"):
        colour = colours[str(m)]
        left.scatter(part["x"], part["y"], s=4, alpha=0.15, color=colour)
        left.plot(part["x"].mean(), part["y"].mean(), "o", ms=9, color=colour, label=str(m),
                  markeredgecolor="black")  # fmt: skip
    left.set_xlabel("AUROC (within concept, centred)")
    left.set_ylabel("likelihood effect (nats/token, within concept)")
    left.set_title("built directions by family", fontsize=9)
    left.legend(fontsize=7)
    slopes = per_concept["slope"].dropna()
    right.hist(slopes.clip(-3, 3), bins=40, color="C0", alpha=0.7)
    scored = record.primary_scored.slope
    if scored.estimate is not None:
        right.axvline(scored.estimate, color="C3", label="pooled primary")
    if scored.low is not None and scored.high is not None:
        right.axvspan(scored.low, scored.high, color="C3", alpha=0.2)
    right.axvline(0, color="black", lw=0.5)
    right.set_xlabel("each concept's own slope (nats/token per unit AUROC; clipped at ±3)")
    right.set_ylabel("concepts")
    right.set_title(
        f"{len(slopes)} concepts, {float((slopes > 0).mean()):.0%} positive "
        f"(primary: {record.primary_scored.verdict})",
        fontsize=9,
    )
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig
