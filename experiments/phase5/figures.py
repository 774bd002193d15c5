"""The run's figures, drawn from its records and its record: Δ per strength and
concept, the seed's F1 against magnitude, Δ's distribution, the specificity matrices, and
the reviewer's first two (predictor against effect above the null per concept with both
intervals, and the per-concept forest plot)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

import numpy as np
import pandas as pd

from experiments.answer import SIGN_LABELS, direction_origin, status_word
from experiments.kernel.effect import SIGNS
from experiments.record import RunRecord, predictor_values
from experiments.record.phase5 import NO_INTERVAL

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation
    from matplotlib.transforms import Bbox, BboxBase

    from experiments.config import RunConfig
    from experiments.phase5.context import RunContext


def plots(
    records: pd.DataFrame, ctx: RunContext, magnitudes: dict[str, float]
) -> dict[str, Figure]:
    """The run's figures by file name: Δ per strength and concept, F1 against magnitude,
    Δ distribution per strength."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs: dict[str, Figure] = {}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    means = records.groupby(["concept", "strength"])["delta"].mean().unstack("strength")
    for synset, row in means.iterrows():
        ax.plot(
            row.index,
            cast("np.ndarray", row.values),
            marker="o",
            label=ctx.graph.get(str(synset)).name,
        )
    overall = records.groupby("strength")["delta"].mean()
    ax.plot(
        overall.index, cast("np.ndarray", overall.values), color="black", linewidth=3, label="mean"
    )
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.set(
        xlabel="steering strength s",
        ylabel="mean Δ = cos(core) − cos(neg)",
        title="Δ against strength per concept",
    )
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    figs["delta_vs_strength.png"] = fig

    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    predictor = ctx.predictor_values()
    shared = sorted(set(predictor) & set(magnitudes))
    xs, ys = [predictor[k] for k in shared], [magnitudes[k] for k in shared]
    ax.scatter(xs, ys)
    ax.set(
        xlabel=f"{_detector(ctx.config)} {ctx.predictor_name} (held-out test split)",
        ylabel="mean |Δ_s − Δ_0|",
        title="F1 against steering magnitude",
    )
    fig.tight_layout()
    place_labels(ax, list(zip(xs, ys, strict=True)), [ctx.graph.get(k).name for k in shared])
    figs["f1_vs_magnitude.png"] = fig

    fig, ax = plt.subplots(figsize=(6, 4.5))
    strengths = sorted(records["strength"].unique())
    ax.violinplot(
        [records[records["strength"] == s]["delta"].to_numpy() for s in strengths],
        positions=range(len(strengths)),
        showmedians=True,
    )
    ax.set_xticks(range(len(strengths)), [f"{s:+g}" for s in strengths])
    ax.axhline(ctx.config.metrics.delta_threshold, color="green", linestyle=":")
    ax.axhline(-ctx.config.metrics.delta_threshold, color="red", linestyle=":")
    ax.set(xlabel="steering strength s", ylabel="Δ", title="Δ distribution per strength")
    fig.tight_layout()
    figs["delta_distribution.png"] = fig
    return figs


def specificity_figure(matrix: pd.DataFrame, title: str) -> Figure:
    """Heatmap of M[steered concept, scored concept]: a bright diagonal is specificity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(matrix)
    fig, ax = plt.subplots(figsize=(1.2 + 0.45 * n, 1.0 + 0.45 * n))
    limit = float(np.nanmax(np.abs(matrix.to_numpy()))) or 1.0
    image = ax.imshow(matrix.to_numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit)
    labels = [c.split(".")[0] for c in matrix.columns]
    ax.set_xticks(range(n), labels, rotation=90, fontsize=7)
    ax.set_yticks(range(len(matrix.index)), [c.split(".")[0] for c in matrix.index], fontsize=7)
    ax.set(xlabel="Δ scored against concept", ylabel="steered toward concept", title=title)
    fig.colorbar(image, ax=ax, shrink=0.8, label="mean signed effect")
    fig.tight_layout()
    return fig


SIGN_COLOURS = {"pos": "tab:blue", "neg": "tab:orange"}


def _signs_with_effects(record: RunRecord) -> list[str]:
    return [
        label
        for label in SIGNS.values()
        if any(v.get(f"above_null_{label}") is not None for v in record.per_concept.values())
    ]


def _bounds(values: Mapping[str, float | None], key: str) -> tuple[float | None, float | None]:
    return values.get(f"{key}_low"), values.get(f"{key}_high")


def _verdict_title(record: RunRecord, key: str, what: str) -> str:
    """``what = value [low, high], status`` of a v2 criterion, for a figure title."""
    c = record.criteria.get(key)
    if c is None:
        return f"{what}: {status_word('not_evaluable')}"
    if c.value is None:
        return f"{what}: {status_word(c.status)}" + (f" ({c.reason})" if c.reason else "")
    interval = record.statistics.intervals.get(key, NO_INTERVAL)
    low, high = interval.low, interval.high
    span = f" [{low:+.2f}, {high:+.2f}]" if low is not None and high is not None else ""
    return f"{what} = {c.value:+.2f}{span}, {status_word(c.status)}"


def _error(value: float, low: float | None, high: float | None) -> list[list[float]] | None:
    if low is None or high is None:
        return None
    return [[max(value - low, 0.0)], [max(high - value, 0.0)]]


# Offsets (in points) tried for a label around its point, nearest first.
LABEL_OFFSETS = [
    (dx * r, dy * r)
    for r in (1, 2, 3.5, 5)
    for dx, dy in ((4, 4), (4, -10), (-4, 4), (-4, -10), (0, 10), (0, -14), (8, -3), (-8, -3))
]


def place_labels(
    ax: Axes, points: list[tuple[float, float]], labels: list[str], fontsize: float = 7
) -> list[Annotation]:
    """Annotate each point with its label where it overlaps no other label, no point
    and stays inside the axes: offsets are tried nearest first (matplotlib alone; no
    adjustText in the environment). A label moved far from its point gets a thin line
    to it. Returns the annotations (a test checks their boxes do not overlap)."""
    fig = ax.figure
    renderer = cast("FigureCanvasAgg", fig.canvas).get_renderer()  # the figures draw on Agg
    inside = ax.get_window_extent(renderer)
    marks = [ax.transData.transform(p) for p in points]
    placed: list[Bbox] = []
    out = []
    for (x, y), text in zip(points, labels, strict=True):
        best, best_cost = None, None
        for dx, dy in LABEL_OFFSETS:
            ann = ax.annotate(
                text,
                (x, y),
                xytext=(dx, dy),
                textcoords="offset points",
                fontsize=fontsize,
                ha="left" if dx >= 0 else "right",
            )
            box = ann.get_window_extent(renderer).expanded(1.05, 1.1)
            cost = sum(_overlap(box, other) for other in placed)
            cost += sum(box.contains(mx, my) for mx, my in marks) * 50.0
            cost += 0.0 if _within(box, inside) else 1e4
            if best_cost is None or cost < best_cost:
                if best is not None:
                    best[0].remove()
                best, best_cost = (ann, box, dx, dy), cost
            else:
                ann.remove()
            if cost == 0:
                break
        assert best is not None  # LABEL_OFFSETS is not empty
        ann, box, dx, dy = best
        if abs(dx) > 8 or abs(dy) > 14:
            ax.annotate(
                "",
                (x, y),
                xytext=(dx, dy + (3 if dy > 0 else 0)),
                textcoords="offset points",
                arrowprops={"arrowstyle": "-", "color": "grey", "linewidth": 0.5},
            )
        placed.append(box)
        out.append(ann)
    return out


def _overlap(a: BboxBase, b: BboxBase) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def _within(box: BboxBase, outer: BboxBase) -> bool:
    return box.x0 >= outer.x0 and box.x1 <= outer.x1 and box.y0 >= outer.y0 and box.y1 <= outer.y1


def _gated(values: Mapping[str, float | None], label: str) -> tuple[int, int]:
    """(k, n): how many of a concept's steered texts at this sign the gate failed."""
    return int(values.get(f"gated_out_{label}") or 0), int(values.get(f"steered_{label}") or 0)


def _detector(config: RunConfig) -> str:
    """What the run's predictor scores, in a word (the answer's: probe, imported vector)."""
    return direction_origin(config.steering.vector_source, config.criteria.predictor).detector


def _concept_label(
    name: str,
    values: Mapping[str, float | None],
    label: str,
    flag: str | None,
    detector: str = "probe",
) -> str:
    """A concept's label: its name, n of its interval, k/n gated, and a degenerate flag."""
    parts = [name]
    n = values.get(f"above_null_{label}_n")
    if n is not None:
        parts.append(f"n={int(n)}")
    k, total = _gated(values, label)
    if k:
        parts.append(f"{k}/{total} gated" + (", not measured" if k == total else ""))
    if flag:
        parts.append(f"⚠ degenerate {detector}")
    return " · ".join(parts)


HOLLOW_NOTE = (
    "hollow at 0, no interval: every steered text gated out, so its effect is not measured "
    "(r still counts its 0 minus the random directions' mean)"
)
HOLLOW_LEGEND = "every text gated out: not measured (at 0)"


def _hollow(values: Mapping[str, float | None], label: str) -> bool:
    """Every steered text of the concept at this sign was gated out: not measured."""
    k, n = _gated(values, label)
    return n > 0 and k == n


def _gated_count(record: RunRecord, concepts: list[str], label: str) -> str:
    """``n concepts, k/n all gated out``: what a panel's title counts, hollow ones too."""
    n = len(concepts)
    k = sum(_hollow(record.per_concept.get(c, {}), label) for c in concepts)
    return f"{n} concepts, {k}/{n} all gated out"


def predictor_effect_figure(record: RunRecord, names: dict[str, str]) -> Figure | None:
    """The v2 question per sign: each concept's predictor (x, with its interval over the
    probe's test texts where the record allows) against its effect above null (y, with
    its interval over the concept's prompts); the threshold and the correlation's verdict
    in the title. Each label says how many units its interval rests on (n) and how many
    steered texts the gate failed (k/n gated); a concept whose texts were all gated out
    is hollow; a degenerate probe (AUROC < 0.5, one class predicted) is flagged and named
    under the figure. Both panels share their axes. None when no sign has an effect
    above null (no random arm)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from experiments.phase5.per_concept import degenerate_probes, predictor_interval

    signs = _signs_with_effects(record)
    if not signs:
        return None
    name = record.config.criteria.predictor
    c = record.config.criteria
    flags = degenerate_probes(record.predictors, name)
    detector = _detector(record.config)
    fig, axes = plt.subplots(
        1, len(signs), figsize=(6 * len(signs), 5.2), squeeze=False, sharex=True, sharey=True
    )
    any_x_interval = any_hollow = False
    placements = []
    xs = predictor_values(record.predictors, name)  # f1_raw falls back to an old run's f1
    for ax, label in zip(axes[0], signs, strict=True):
        points, labels, shown = [], [], []
        for synset, values in sorted(record.per_concept.items()):
            x = xs.get(synset)
            y = values.get(f"above_null_{label}")
            if x is None or y is None:
                continue
            xlow, xhigh = predictor_interval(
                record.predictors.get(synset, {}), name, c.confidence, c.n_boot
            )
            any_x_interval |= xlow is not None
            ylow, yhigh = _bounds(values, f"above_null_{label}")
            hollow = _hollow(values, label)
            if hollow:  # not measured: drawn at 0 without an interval, as the note says
                y, ylow, yhigh = 0.0, None, None
            any_hollow |= hollow
            shown.append(synset)
            colour = "red" if synset in flags else SIGN_COLOURS[label]
            ax.errorbar(
                x,
                y,
                xerr=_error(x, xlow, xhigh),
                yerr=_error(y, ylow, yhigh),
                fmt="X" if synset in flags else "o",
                markersize=7,
                color=colour,
                markerfacecolor="none" if hollow else colour,
                ecolor="grey",
                elinewidth=1,
                capsize=2,
            )
            points.append((x, y))
            labels.append(
                _concept_label(
                    names.get(synset, synset), values, label, flags.get(synset), detector
                )
            )
        ax.axhline(0, color="black", linewidth=0.5)
        ax.axhline(c.effect_min, color="green", linestyle=":", label=f"threshold {c.effect_min:g}")
        ax.set(
            xlabel=name,
            ylabel="effect above null (gated, Δ units)",
            title=_verdict_title(
                record, f"v2_predictor_vs_effect_{label}", f"{SIGN_LABELS[label]}: r"
            )
            + f"\n{_gated_count(record, shown, label)}",
        )
        handles, _labels = ax.get_legend_handles_labels()
        if any(_hollow(record.per_concept[k], label) for k in shown):
            handles.append(
                Line2D([], [], marker="o", linestyle="", color="grey", markerfacecolor="none",
                       label=HOLLOW_LEGEND)
            )  # fmt: skip
        ax.legend(handles=handles, fontsize=7, loc="upper left")
        placements.append((ax, points, labels))
    level = f"{c.confidence:.0%}"
    x_note = (
        f"x: {level} bootstrap over the probe's test texts"
        if any_x_interval
        else f"x: no interval ({name} needs per-text scores the record does not keep)"
    )
    notes = [
        f"Predictor against effect above null, per concept (y: {level} interval over the "
        f"concept's n units; {x_note})"
    ]
    if any_hollow:
        notes.append(HOLLOW_NOTE)
    if flags:
        notes.append(
            f"⚠ degenerate {detector} (red X): "
            + "; ".join(f"{names.get(k, k)}: {why}" for k, why in flags.items())
        )
    fig.suptitle("\n".join(notes), fontsize=8)
    fig.tight_layout()
    for ax, points, labels in placements:  # after the layout, so the boxes are final
        place_labels(ax, points, labels)
    return fig


def forest_figure(record: RunRecord, names: dict[str, str]) -> Figure | None:
    """Per concept, the effect above null with its interval, per sign; the pooled
    estimate (the v2 criterion) at the bottom. Each row names how many units its
    intervals rest on and how many texts the gate failed; a concept whose texts were all
    gated out at a sign is drawn hollow. None without an effect above null."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from experiments.phase5.per_concept import degenerate_probes

    signs = _signs_with_effects(record)
    if not signs:
        return None
    flags = degenerate_probes(record.predictors, record.config.criteria.predictor)
    concepts = sorted(record.per_concept, key=lambda k: names.get(k, k), reverse=True)
    fig, ax = plt.subplots(figsize=(10, 2.0 + 0.42 * (len(concepts) + 1)))
    offsets = {label: (0.15 if label == "pos" else -0.15) for label in signs}
    intervals = record.statistics.intervals
    any_hollow = False
    for label in signs:
        for i, synset in enumerate(concepts, start=1):
            values = record.per_concept[synset]
            value = values.get(f"above_null_{label}")
            if value is None:
                continue
            low, high = _bounds(values, f"above_null_{label}")
            hollow = _hollow(values, label)
            if hollow:  # not measured: drawn at 0 without an interval, as the note says
                value, low, high = 0.0, None, None
            any_hollow |= hollow
            ax.errorbar(
                [value],
                [i + offsets[label]],
                xerr=_error(value, low, high),
                fmt="o",
                color=SIGN_COLOURS[label],
                markerfacecolor="none" if hollow else SIGN_COLOURS[label],
                capsize=2,
            )
        pooled = intervals.get(f"v2_effect_above_null_{label}", NO_INTERVAL)
        if pooled.estimate is not None:
            ax.errorbar(
                [pooled.estimate],
                [offsets[label]],
                xerr=_error(pooled.estimate, pooled.low, pooled.high),
                fmt="D",
                markersize=7,
                color=SIGN_COLOURS[label],
                capsize=3,
            )
    ax.axvline(0, color="black", linewidth=0.5)
    threshold = record.config.criteria.effect_min
    ax.axvline(threshold, color="green", linestyle=":", label=f"threshold {threshold:g}")
    pooled_counts = (
        intervals.get(f"v2_effect_above_null_{lab}", NO_INTERVAL).n_clusters for lab in signs
    )
    pooled_n = next((n for n in pooled_counts if n), None)
    rows = [f"all concepts (v2){f', n={int(pooled_n)} concepts' if pooled_n else ''}"]
    for synset in concepts:
        values = record.per_concept[synset]
        parts = [names.get(synset, synset)]
        n_units = next((values.get(f"above_null_{lab}_n") for lab in signs), None)
        if n_units is not None:
            parts.append(f"n={int(n_units)}")
        for lab in signs:
            k, total = _gated(values, lab)
            if k:
                parts.append(f"{SIGN_LABELS[lab]}: {k}/{total} gated")
        if synset in flags:
            parts.append("⚠")
        rows.append(" · ".join(parts))
    ax.set_yticks([0, *range(1, len(concepts) + 1)], rows, fontsize=8)
    level = f"{record.config.criteria.confidence:.0%}"
    notes = [f"effect above null (gated, Δ units), {level} interval over each row's n units"]
    if any_hollow:
        notes.append(HOLLOW_NOTE)
    if flags:
        notes.append(
            f"⚠ the concept's {_detector(record.config)} is degenerate as a detector "
            "(predictor_vs_effect.png says how)"
        )
    measured = [c for c in concepts if any(f"above_null_{lab}" in record.per_concept[c]
                                           for lab in signs)]  # fmt: skip
    counts = "; ".join(
        f"{SIGN_LABELS[lab]}: {_gated_count(record, measured, lab)}" for lab in signs
    )
    ax.set(
        xlabel="\n".join(notes),
        title=f"Effect above the random-direction null, per concept\n{counts}",
    )
    handles = [
        Line2D([], [], marker="o", linestyle="", color=SIGN_COLOURS[lab], label=SIGN_LABELS[lab])
        for lab in signs
    ]
    if any_hollow:
        handles.append(
            Line2D([], [], marker="o", linestyle="", color="grey", markerfacecolor="none",
                   label=HOLLOW_LEGEND)
        )  # fmt: skip
    handles.append(Line2D([], [], color="green", linestyle=":", label=f"threshold {threshold:g}"))
    ax.legend(handles=handles, fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def reviewer_figures(record: RunRecord, names: dict[str, str]) -> dict[str, Figure]:
    """The figures a reviewer asks for first, from the record alone."""
    drawn = {
        "predictor_vs_effect.png": predictor_effect_figure(record, names),
        "effect_forest.png": forest_figure(record, names),
    }
    return {file_name: fig for file_name, fig in drawn.items() if fig is not None}
