"""The run's figures, drawn from its records and its record: Δ per strength and
concept, the seed's F1 against magnitude, Δ's distribution, the specificity matrices, and
the reviewer's first two (predictor against effect above the null per concept with both
intervals, and the per-concept forest plot)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from experiments.pipeline.effect import SIGNS
from experiments.record import RunRecord

if TYPE_CHECKING:
    from experiments.pipeline.context import RunContext


def plots(
    records: pd.DataFrame, ctx: RunContext, magnitudes: dict[str, float]
) -> dict[str, object]:
    """The run's figures by file name: Δ per strength and concept, F1 against magnitude,
    Δ distribution per strength."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = {}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    means = records.groupby(["concept", "strength"])["delta"].mean().unstack("strength")
    for synset, row in means.iterrows():
        ax.plot(row.index, row.values, marker="o", label=ctx.graph.get(synset).name)
    overall = records.groupby("strength")["delta"].mean()
    ax.plot(overall.index, overall.values, color="black", linewidth=3, label="mean")
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
    for k, x, y in zip(shared, xs, ys, strict=True):
        ax.annotate(ctx.graph.get(k).name, (x, y), fontsize=7)
    ax.set(
        xlabel=f"classifier {ctx.predictor_name} (held-out test split)",
        ylabel="mean |Δ_s − Δ_0|",
        title="F1 against steering magnitude",
    )
    fig.tight_layout()
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


def specificity_figure(matrix: pd.DataFrame, title: str):
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


SIGN_TITLES = {"pos": "s > 0", "neg": "s < 0"}
SIGN_COLOURS = {"pos": "tab:blue", "neg": "tab:orange"}


def _signs_with_effects(record: RunRecord) -> list[str]:
    return [
        label
        for label in SIGNS.values()
        if any(v.get(f"above_null_{label}") is not None for v in record.per_concept.values())
    ]


def _bounds(values: dict, key: str) -> tuple[float | None, float | None]:
    return values.get(f"{key}_low"), values.get(f"{key}_high")


def _verdict_title(record: RunRecord, key: str, what: str) -> str:
    """``what = value [low, high], status`` of a v2 criterion, for a figure title."""
    c = record.criteria.get(key)
    if c is None or c.value is None:
        return f"{what}: not evaluable"
    interval = record.statistics.get("intervals", {}).get(key, {})
    low, high = interval.get("low"), interval.get("high")
    span = f" [{low:+.2f}, {high:+.2f}]" if low is not None and high is not None else ""
    return f"{what} = {c.value:+.2f}{span}, {c.status}"


def _error(value: float, low: float | None, high: float | None) -> list[list[float]] | None:
    if low is None or high is None:
        return None
    return [[max(value - low, 0.0)], [max(high - value, 0.0)]]


def predictor_effect_figure(record: RunRecord, names: dict[str, str]):
    """The v2 question per sign: each concept's predictor (x, with its interval over the
    probe's test texts where the record allows) against its effect above null (y, with
    its interval over the concept's prompts); the threshold and the correlation's verdict
    in the title. None when no sign has an effect above null (no random arm)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.pipeline.per_concept import predictor_interval

    signs = _signs_with_effects(record)
    if not signs:
        return None
    name = record.config.criteria.predictor
    c = record.config.criteria
    fig, axes = plt.subplots(1, len(signs), figsize=(5.5 * len(signs), 4.6), squeeze=False)
    any_x_interval = False
    for ax, label in zip(axes[0], signs, strict=True):
        for synset, values in sorted(record.per_concept.items()):
            x = record.predictors.get(synset, {}).get(name)
            if x is None and name == "f1_raw":
                x = record.predictors.get(synset, {}).get("f1")
            y = values.get(f"above_null_{label}")
            if x is None or y is None:
                continue
            xlow, xhigh = predictor_interval(
                record.predictors.get(synset, {}), name, c.confidence, c.n_boot
            )
            any_x_interval |= xlow is not None
            ylow, yhigh = _bounds(values, f"above_null_{label}")
            ax.errorbar(
                x,
                y,
                xerr=_error(x, xlow, xhigh),
                yerr=_error(y, ylow, yhigh),
                fmt="o",
                color=SIGN_COLOURS[label],
                ecolor="grey",
                elinewidth=1,
                capsize=2,
            )
            ax.annotate(
                names.get(synset, synset),
                (x, y),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
        ax.axhline(0, color="black", linewidth=0.5)
        ax.axhline(c.effect_min, color="green", linestyle=":", label=f"threshold {c.effect_min:g}")
        ax.set(
            xlabel=name,
            ylabel="effect above null (gated, Δ units)",
            title=_verdict_title(
                record, f"v2_predictor_vs_effect_{label}", f"{SIGN_TITLES[label]}: r"
            ),
        )
        ax.legend(fontsize=7, loc="best")
    level = f"{c.confidence:.0%}"
    x_note = (
        f"x: {level} bootstrap over the probe's test texts"
        if any_x_interval
        else f"x: no interval ({name} needs per-text scores the record does not keep)"
    )
    fig.suptitle(
        f"Predictor against effect above null, per concept (y: {level} interval over the "
        f"concept's prompts; {x_note})",
        fontsize=8,
    )
    fig.tight_layout()
    return fig


def forest_figure(record: RunRecord, names: dict[str, str]):
    """Per concept, the effect above null with its interval, per sign; the pooled
    estimate (the v2 criterion) at the bottom. None without an effect above null."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    signs = _signs_with_effects(record)
    if not signs:
        return None
    concepts = sorted(record.per_concept, key=lambda k: names.get(k, k), reverse=True)
    fig, ax = plt.subplots(figsize=(7, 1.4 + 0.38 * (len(concepts) + 1)))
    offsets = {label: (0.15 if label == "pos" else -0.15) for label in signs}
    intervals = record.statistics.get("intervals", {})
    for label in signs:
        ys, xs, lows, highs = [], [], [], []
        for i, synset in enumerate(concepts, start=1):
            value = record.per_concept[synset].get(f"above_null_{label}")
            if value is None:
                continue
            low, high = _bounds(record.per_concept[synset], f"above_null_{label}")
            ys.append(i + offsets[label])
            xs.append(value)
            lows.append(value if low is None else low)
            highs.append(value if high is None else high)
        ax.errorbar(
            xs,
            ys,
            xerr=[
                [x - lo for x, lo in zip(xs, lows, strict=True)],
                [hi - x for x, hi in zip(xs, highs, strict=True)],
            ],
            fmt="o",
            color=SIGN_COLOURS[label],
            capsize=2,
            label=SIGN_TITLES[label],
        )
        pooled = intervals.get(f"v2_effect_above_null_{label}", {})
        if pooled.get("estimate") is not None:
            est = pooled["estimate"]
            low, high = pooled.get("low"), pooled.get("high")
            ax.errorbar(
                [est],
                [offsets[label]],
                xerr=_error(est, low, high),
                fmt="D",
                markersize=7,
                color=SIGN_COLOURS[label],
                capsize=3,
            )
    ax.axvline(0, color="black", linewidth=0.5)
    threshold = record.config.criteria.effect_min
    ax.axvline(threshold, color="green", linestyle=":", label=f"threshold {threshold:g}")
    ax.set_yticks(
        [0, *range(1, len(concepts) + 1)],
        ["all concepts (v2)", *[names.get(k, k) for k in concepts]],
        fontsize=8,
    )
    level = f"{record.config.criteria.confidence:.0%}"
    ax.set(
        xlabel=f"effect above null (gated, Δ units), {level} interval",
        title="Effect above the random-direction null, per concept",
    )
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def reviewer_figures(record: RunRecord, names: dict[str, str]) -> dict[str, object]:
    """The figures a reviewer asks for first, from the record alone."""
    out = {}
    for file_name, make in (
        ("predictor_vs_effect.png", predictor_effect_figure),
        ("effect_forest.png", forest_figure),
    ):
        fig = make(record, names)
        if fig is not None:
            out[file_name] = fig
    return out
