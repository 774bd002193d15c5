"""Direction diagnostics: do the concept directions share a component, and is it the format?

The first release's ten steering directions had a mean pairwise cosine of +0.46: a
question-versus-statement axis was shared by every probe weight (docs/notes.md, 'The
first release's directions').
These pure functions make that visible for any set of directions: the pairwise cosine
matrix and its mean off-diagonal value, each direction's cosine with the format axis
(the training question templates minus their declarative rewrites on neutral content,
see :func:`experiments.prompts.format_axis_texts`), and each probe's cosine with its own
diffmean direction. Phase 4 logs them for every classifier set (all direction sources),
Phase 5 for the directions it actually steers with (``RunRecord.diagnostics``).

A cosine with the format axis needs a yardstick: a random direction in 640 dimensions
has |cos| ≈ 0.03 with any fixed axis, but activations are far from isotropic, so the
diagnostics also report ``format_axis_floor``, the mean |cos| with the axis of
x_a − ½(x_b + x_c) for three neutral texts of one template: what a 1×1×1 direction with
no format component at all would show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from steering.directions import DirectionContext, get_direction_source
from steering.nulls import unit
from steering.probes import LinearProbe

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMAT_AXIS_FORMAT = "steer-eval/format-axis/v1"
# The direction sources Phase 4 diagnoses for every classifier set.
PHASE4_SOURCES: tuple[str, ...] = ("classifier", "diffmean", "classifier_deformat")


def format_axis(questions: np.ndarray, statements: np.ndarray) -> tuple[np.ndarray, float]:
    """(unit axis, raw norm) of mean(questions) − mean(statements), rows paired or not."""
    diff = np.asarray(questions, np.float64).mean(0) - np.asarray(statements, np.float64).mean(0)
    return unit(diff), float(np.linalg.norm(diff))


def format_axis_floor(
    groups: Sequence[np.ndarray], axis: np.ndarray, seed: int = 0, draws: int = 20
) -> float | None:
    """Mean |cos(axis, x_a − ½(x_b + x_c))| over seeded triples of rows within each group
    (a group: one template's texts on different neutral subjects); None without triples."""
    rng = np.random.default_rng(seed)
    axis_unit = unit(axis)
    values = []
    for group in groups:
        if len(group) < 3:
            continue
        for _ in range(draws):
            a, b, c = rng.choice(len(group), 3, replace=False)
            diff = group[a] - (group[b] + group[c]) / 2
            norm = float(np.linalg.norm(diff))
            if norm > 0:  # identical texts (e.g. unknown words to a tiny tokenizer) say nothing
                values.append(abs(diff @ axis_unit) / norm)
    return float(np.mean(values)) if values else None


def cosine_matrix(directions: Mapping[str, np.ndarray]) -> np.ndarray:
    """Pairwise cosines of the directions, in their mapping order."""
    stacked = np.stack([unit(v) for v in directions.values()])
    return cast(np.ndarray, stacked @ stacked.T)


def off_diagonal(matrix: np.ndarray) -> np.ndarray:
    return matrix[~np.eye(len(matrix), dtype=bool)]


def direction_diagnostics(
    directions: Mapping[str, np.ndarray], axis: np.ndarray | None = None
) -> dict[str, object]:
    """Cosine matrix, mean/max off-diagonal cosine and cosines with the format axis."""
    names = list(directions)
    matrix = cosine_matrix(directions)
    pairs = off_diagonal(matrix)
    out: dict[str, object] = {
        "concepts": names,
        "cosine_matrix": [[float(x) for x in row] for row in matrix],
        "mean_pairwise_cosine": float(pairs.mean()) if len(pairs) else None,
        "max_pairwise_cosine": float(pairs.max()) if len(pairs) else None,
        "cos_format_axis": None,
        "mean_abs_cos_format_axis": None,
    }
    if axis is not None:
        axis_unit = unit(axis)
        cos = {k: float(unit(v) @ axis_unit) for k, v in directions.items()}
        out["cos_format_axis"] = cos
        out["mean_abs_cos_format_axis"] = float(np.mean(np.abs(list(cos.values()))))
    return out


def probe_diffmean_cosines(probes: Mapping[str, LinearProbe]) -> dict[str, float]:
    """cos(probe weight, diffmean direction) per concept that has a diffmean vector."""
    return {
        k: float(p.direction() @ unit(p.diffmean))
        for k, p in probes.items()
        if p.diffmean is not None
    }


def source_directions(
    probes: Mapping[str, LinearProbe], source: str, axis: np.ndarray | None
) -> dict[str, np.ndarray]:
    """Each concept's direction from the named direction source."""
    fn = get_direction_source(source)
    ctx = DirectionContext(format_axis=axis)
    return {k: np.asarray(fn(p, ctx), dtype=np.float64) for k, p in probes.items()}


def classifier_set_diagnostics(
    probes: Mapping[str, LinearProbe], axis: np.ndarray | None, floor: float | None = None
) -> dict[str, object]:
    """Phase 4: diagnostics of every direction source a classifier set offers."""
    sources = [s for s in PHASE4_SOURCES if s != "classifier_deformat" or axis is not None]
    if any(p.diffmean is None for p in probes.values()):
        sources = [s for s in sources if s != "diffmean"]
    cos_dm = probe_diffmean_cosines(probes)
    return {
        "sources": {
            s: direction_diagnostics(source_directions(probes, s, axis), axis) for s in sources
        },
        "cos_probe_diffmean": cos_dm,
        "mean_cos_probe_diffmean": float(np.mean(list(cos_dm.values()))) if cos_dm else None,
        "format_axis_floor": floor,
    }


def steering_diagnostics(
    directions: Mapping[str, np.ndarray],
    probes: Mapping[str, LinearProbe],
    axis: np.ndarray | None,
    source: str,
    floor: float | None = None,
) -> dict[str, object]:
    """Phase 5: diagnostics of the directions a run steers with (from ``source``)."""
    cos_dm = probe_diffmean_cosines(probes)
    return {
        "source": source,
        **direction_diagnostics(directions, axis),
        "format_axis_floor": floor,
        "cos_probe_diffmean": cos_dm,
        "mean_cos_probe_diffmean": float(np.mean(list(cos_dm.values()))) if cos_dm else None,
    }


def diagnostics_metrics(diag: Mapping[str, Any], prefix: str) -> dict[str, float | None]:
    """Flat MLflow metrics of one :func:`direction_diagnostics`-shaped dict."""
    out: dict[str, float | None] = {
        f"{prefix}/mean_pairwise_cosine": diag.get("mean_pairwise_cosine"),
        f"{prefix}/max_pairwise_cosine": diag.get("max_pairwise_cosine"),
        f"{prefix}/mean_abs_cos_format_axis": diag.get("mean_abs_cos_format_axis"),
    }
    for k, v in (diag.get("cos_format_axis") or {}).items():
        out[f"{prefix}/cos_format_axis/{k}"] = v
    if "format_axis_floor" in diag:
        out[f"{prefix}/format_axis_floor"] = diag.get("format_axis_floor")
    if "cos_probe_diffmean" in diag:
        out[f"{prefix}/mean_cos_probe_diffmean"] = diag.get("mean_cos_probe_diffmean")
        for k, v in diag["cos_probe_diffmean"].items():
            out[f"{prefix}/cos_probe_diffmean/{k}"] = v
    return out


def cosine_heatmap(panels: Mapping[str, Mapping[str, Any]], title: str) -> Figure:
    """One heatmap per named diagnostics dict (``concepts`` + ``cosine_matrix``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 4.8), squeeze=False)
    image = None
    for ax, (name, diag) in zip(axes[0], panels.items(), strict=True):
        matrix = np.asarray(diag["cosine_matrix"])
        labels = [c.split(".")[0] for c in diag["concepts"]]
        image = ax.imshow(matrix, cmap="RdBu_r", vmin=-1, vmax=1)
        for (i, j), value in np.ndenumerate(matrix):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6)
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        mean = diag.get("mean_pairwise_cosine")
        fmt = diag.get("mean_abs_cos_format_axis")
        subtitle = f"mean off-diag {mean:+.2f}" if mean is not None else ""
        if fmt is not None:
            subtitle += f", mean |cos fmt| {fmt:.2f}"
        ax.set_title(f"{name}\n{subtitle}", fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=list(axes[0]), shrink=0.8)
    fig.suptitle(title)
    return fig


def layer_heatmap(
    aurocs: Mapping[int, Mapping[str, float | None]], metric: str = "AUROC"
) -> Figure:
    """Layer × concept heatmap of a held-out metric (rows: layers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = sorted(aurocs)
    concepts = list(next(iter(aurocs.values()))) if aurocs else []
    grid = np.array(
        [[np.nan if aurocs[la][c] is None else aurocs[la][c] for c in concepts] for la in layers]
    )
    fig, ax = plt.subplots(figsize=(1.0 + 0.7 * len(concepts), 1.2 + 0.5 * len(layers)))
    image = ax.imshow(grid, cmap="viridis", vmin=0.5, vmax=1.0, aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7, color="w")
    ax.set_xticks(range(len(concepts)), [c.split(".")[0] for c in concepts], rotation=90)
    ax.set_yticks(range(len(layers)), [f"L{la}" for la in layers])
    ax.set_title(f"held-out {metric} per layer and concept")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return fig


def log_diagnostics(run_id: str, diag: Mapping[str, Any], prefix: str = "diagnostics") -> None:
    """Log a steering-diagnostics dict to an MLflow run: metrics, heatmap and JSON."""
    import matplotlib.pyplot as plt

    from experiments import tracking

    if not diag:
        return
    tracking.log_metrics(run_id, diagnostics_metrics(diag, prefix))
    c = tracking.client()
    c.log_dict(run_id, dict(diag), f"{prefix}/directions.json")
    fig = cosine_heatmap({diag.get("source", "directions"): diag}, "steering directions")
    c.log_figure(run_id, fig, f"{prefix}/direction_cosines.png")
    plt.close(fig)
