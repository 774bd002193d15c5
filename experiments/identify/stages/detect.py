"""Every direction scored as its own detector: the projection onto it is the score.

AUROC and average precision rank the test texts without a threshold; calibrated F1
takes the threshold that maximises F1 on the validation split's projections
(``steering.probes.choose_threshold``, as Phase 4 does) and applies it unchanged to the
test split. A logistic probe's decision is an increasing function of its projection,
so for a probe this gives the probe's own AUROC, AP and calibrated F1; a diffmean or a
rotated direction gets the same treatment instead of borrowing a probe's metrics.

For split-half reliabilities the per-text scores are kept: :func:`half_metrics` scores
each half of the test split (halves stratified by label, so each holds both classes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.metrics import average_precision_score, f1_score, roc_auc_score

from steering.probes import choose_threshold

# The direction's detection metrics: fields of Detection, each with split halves
# (half_metrics); the study's input-side predictors (cells.PREDICTORS) begin with them.
METRICS = ("auroc", "ap", "f1_calibrated")


@dataclass(frozen=True)
class Detection:
    """A direction's test-split scores and its detection metrics."""

    auroc: float
    ap: float
    f1_calibrated: float
    threshold: float
    scores: np.ndarray  # projections of the texts AUROC ranks (the test split by default)
    labels: np.ndarray | None = None  # their labels when not the test split's (held_out)

    def metrics(self) -> dict[str, float]:
        return {m: getattr(self, m) for m in METRICS}


def score_direction(
    direction: np.ndarray,
    test: tuple[np.ndarray, np.ndarray],
    validation: tuple[np.ndarray, np.ndarray],
    held_out: bool = False,
) -> Detection:
    """Detection metrics of the projection onto ``direction`` (features, labels splits).
    ``held_out`` (``identify.auroc_texts: held_out``): AUROC and AP rank the test and the
    validation texts together (neither needs a threshold; twice the texts, half the
    measurement error), calibrated F1 stays on the test split at the threshold the
    validation split chose. ``scores`` and ``labels`` are then the texts AUROC ranked,
    test first (their split halves include the validation texts, F1's too)."""
    d = np.asarray(direction, dtype=np.float64)
    x_test, y_test = test
    x_val, y_val = validation
    y_test = np.asarray(y_test, dtype=int)
    scores = np.asarray(x_test, dtype=np.float64) @ d
    val_scores = np.asarray(x_val, dtype=np.float64) @ d
    threshold = choose_threshold(val_scores, np.asarray(y_val))
    f1 = float(f1_score(y_test, (scores > threshold).astype(int), zero_division=0))
    ranked, labels = scores, None
    if held_out:
        ranked = np.concatenate([scores, val_scores])
        labels = np.concatenate([y_test, np.asarray(y_val, dtype=int)])
    y_ranked = y_test if labels is None else labels
    return Detection(
        auroc=float(roc_auc_score(y_ranked, ranked)),
        ap=float(average_precision_score(y_ranked, ranked)),
        f1_calibrated=f1,
        threshold=float(threshold),
        scores=ranked,
        labels=labels,
    )


def auroc_rows(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """AUROC along the last axis of ``scores`` (labels per position of that axis), by the
    rank-sum formula with average ranks (ties count half), as sklearn computes it."""
    from scipy.stats import rankdata

    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=int)
    pos = labels == 1
    n_pos = pos.sum(axis=-1)
    n_neg = (~pos).sum(axis=-1)
    ranks = rankdata(scores, axis=-1)
    auroc: np.ndarray = ((ranks * pos).sum(axis=-1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    return auroc


def ap_rows(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Average precision along the last axis: the mean over positives of the precision at
    their rank (sklearn's step-wise AP when no scores tie, which projections of distinct
    texts onto a real direction do not)."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.broadcast_to(np.asarray(labels, dtype=int), scores.shape)
    order = np.argsort(-scores, axis=-1, kind="stable")
    hits = np.take_along_axis(labels, order, axis=-1)
    tp = np.cumsum(hits, axis=-1)
    precision = tp / np.arange(1, scores.shape[-1] + 1)
    ap: np.ndarray = (precision * hits).sum(axis=-1) / hits.sum(axis=-1)
    return ap


def f1_rows(scores: np.ndarray, labels: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """F1 along the last axis at per-row thresholds (predict 1 when score > threshold)."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.broadcast_to(np.asarray(labels, dtype=int), scores.shape)
    predicted = scores > np.asarray(thresholds, dtype=np.float64)[(...,) + (None,) * 1]
    tp = (predicted & (labels == 1)).sum(axis=-1)
    fp = (predicted & (labels == 0)).sum(axis=-1)
    fn = (~predicted & (labels == 1)).sum(axis=-1)
    denominator = 2 * tp + fp + fn
    return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)


def half_metrics(
    scores: np.ndarray, thresholds: np.ndarray, labels: np.ndarray, orders: np.ndarray
) -> dict[str, np.ndarray]:
    """Each metric on each half of the test split, for many directions of one concept.

    ``scores`` is [directions, texts] (the test projections), ``thresholds``
    [directions], ``orders`` [splits, texts] (even positions half A, odd half B; the
    same splits for every direction of the concept, since they share the texts).
    Returns {metric: [directions, splits, 2]}.
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=int)
    out: dict[str, list[np.ndarray]] = {m: [] for m in METRICS}
    for rows in (orders[:, 0::2], orders[:, 1::2]):
        s = scores[:, rows]  # [directions, splits, half]
        y = labels[rows]  # [splits, half]
        out["auroc"].append(auroc_rows(s, np.broadcast_to(y, s.shape)))
        out["ap"].append(ap_rows(s, y))
        t = np.broadcast_to(np.asarray(thresholds, dtype=np.float64)[:, None], s.shape[:2])
        out["f1_calibrated"].append(f1_rows(s, y, t))
    return {m: np.stack(v, axis=-1) for m, v in out.items()}


def name_free_auroc(
    direction: np.ndarray, positives: np.ndarray, test: tuple[np.ndarray, np.ndarray]
) -> float:
    """AUROC of the projection onto ``direction``: name-free positives against the test
    split's negatives (NaN without positives)."""
    x_test, y_test = test
    negatives = np.asarray(x_test, dtype=np.float64)[np.asarray(y_test) == 0]
    if not len(positives) or not len(negatives):
        return float("nan")
    d = np.asarray(direction, dtype=np.float64)
    scores = np.concatenate([np.asarray(positives, dtype=np.float64) @ d, negatives @ d])
    labels = np.r_[np.ones(len(positives)), np.zeros(len(negatives))]
    return float(roc_auc_score(labels, scores))
