"""What a Phase 4 run logs, as plain functions of probes and diagnostics.

Kept apart from the probe stage so the stage reads as train → evaluate → save, and so
these pieces (metric names, tables, figures) can be tested without a model. No import
of the stage itself: it imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.kernel.diagnostics import diagnostics_metrics
from steering.probes import LinearProbe

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PER_CONCEPT_KEYS = (
    "auroc",
    "ap",
    "f1_raw",
    "f1_calibrated",
    "precision_raw",
    "recall_raw",
    "precision_calibrated",
    "recall_calibrated",
    "threshold",
)


def set_metrics(
    probes: Mapping[str, LinearProbe],
    means: Mapping[str, float],
    diagnostics: Mapping[str, Any],
    layer_tag: str = "",
) -> dict[str, float | None]:
    """MLflow metrics of one probe set: ``{key}{layer_tag}/{synset}``, ``mean_{key}{layer_tag}``
    and ``diag{layer_tag}/{source}/...`` (``layer_tag`` is "" or "/L9")."""
    out: dict[str, float | None] = {f"mean_{k}{layer_tag}": v for k, v in means.items()}
    for synset, probe in probes.items():
        for key in PER_CONCEPT_KEYS:
            out[f"{key}{layer_tag}/{synset}"] = probe.metrics.get(key)
    for source, diag in diagnostics.get("sources", {}).items():
        out.update(diagnostics_metrics(diag, f"diag{layer_tag}/{source}"))
    out[f"diag{layer_tag}/mean_cos_probe_diffmean"] = diagnostics.get("mean_cos_probe_diffmean")
    out[f"diag{layer_tag}/format_axis_floor"] = diagnostics.get("format_axis_floor")
    for synset, value in diagnostics.get("cos_probe_diffmean", {}).items():
        out[f"diag{layer_tag}/cos_probe_diffmean/{synset}"] = value
    return out


def metrics_rows(probes: Mapping[str, LinearProbe]) -> list[dict[str, Any]]:
    """One row per concept for the ``classifier_metrics.json`` table."""
    rows = []
    for synset, probe in probes.items():
        m = probe.metrics
        row = {"concept": synset, **{k: m.get(k) for k in PER_CONCEPT_KEYS}}
        row.update(n_test_pos=m.get("n_test_pos"), n_test_neg=m.get("n_test_neg"))
        for which in ("raw", "calibrated"):
            for cell, count in (m.get(f"confusion_{which}") or {}).items():
                row[f"{cell}_{which}"] = count
        rows.append(row)
    return rows


def confusion_figure(probes: Mapping[str, LinearProbe]) -> Figure:
    """Held-out confusion matrices at the calibrated threshold (raw F1 in the title)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(probes)
    cols = min(5, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.8 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, (synset, probe) in zip(axes.flat, probes.items(), strict=False):
        m = probe.metrics
        cm = m.get("confusion_calibrated") or m["confusion_raw"]
        grid = np.array([[cm["tn"], cm["fp"]], [cm["fn"], cm["tp"]]])
        ax.axis("on")
        ax.imshow(grid, cmap="Blues", vmin=0)
        for (i, j), value in np.ndenumerate(grid):
            ax.text(j, i, str(value), ha="center", va="center")
        ax.set_xticks([0, 1], ["pred 0", "pred 1"])
        ax.set_yticks([0, 1], ["true 0", "true 1"])
        cal = m.get("f1_calibrated")
        cal_text = "n/a" if cal is None else f"{cal:.2f}"
        ax.set_title(
            f"{synset}\nF1 cal {cal_text} / raw {m['f1_raw']:.2f}, AUROC {m['auroc']:.2f}",
            fontsize=7,
        )
    fig.suptitle("Phase 4 test-split confusion matrices (calibrated threshold)")
    fig.tight_layout()
    return fig
