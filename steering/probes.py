"""Linear concept probes on the residual stream, and the steering directions they give.

Features are centred on the training mean and divided by one global scale (the mean
norm of the centred features) rather than standardised per feature: with a 1×1×1
training set per-feature variances are meaningless, and a shift plus a single scalar
keeps the learned direction identical to the direction in raw residual space
(w_raw = w / scale, b_raw = b − w_raw·mean), which Phase 5 steers with. Centring
matters because every prompt's pooled residual shares a large common component, which
L2 regularisation would otherwise fight (measured: mean held-out F1 0.23 → 0.28 at the
same AUROC on the embedded model, 1×1×1).

Held-out metrics say what they measure (:func:`evaluate_probe`): AUROC and average
precision rank the test texts without any threshold; ``f1_raw`` is F1 at the fitted
decision (> 0), whose intercept comes from as few as three training texts; and
``f1_calibrated`` is F1 at a threshold chosen on a separate validation split
(:func:`choose_threshold`) and applied unchanged to the test split.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import (
    average_precision_score,
    confusion_matrix,
    f1_score,
    precision_score,
    recall_score,
    roc_auc_score,
)

PROBE_FORMAT = "steer-eval/linear-probe/v1"
# Per-concept detection quality that criterion 3 may correlate with steering
# (``criteria.predictor``); each is a key of LinearProbe.metrics.
Predictor = Literal["f1_calibrated", "f1_raw", "auroc", "ap"]
PREDICTORS: tuple[str, ...] = get_args(Predictor)  # the one list (config's type is this)


class ProbeError(ValueError):
    """A probe file is missing, malformed, or was trained for another model or layer."""


@dataclass(frozen=True)
class TrainSpec:
    """Prompts per class for training, written ``PxNxU`` (positive × negative × neutral)."""

    n_pos: int = 1
    n_neg: int = 1
    n_neutral: int = 1

    @classmethod
    def parse(cls, text: str) -> TrainSpec:
        parts = text.lower().split("x")
        try:
            values = [int(p) for p in parts]
        except ValueError:
            values = []
        if len(values) != 3 or min(values) < 0 or values[0] < 1 or values[1] + values[2] < 1:
            raise ValueError(
                f"training spec {text!r} is not of the form PxNxU with P>=1 and N+U>=1 "
                "(for example 1x1x1 or 5x5x5)"
            )
        return cls(*values)

    def __str__(self) -> str:
        return f"{self.n_pos}x{self.n_neg}x{self.n_neutral}"


@dataclass
class LinearProbe:
    """A logistic-regression probe, stored with everything needed to reuse it safely."""

    concept: str
    weight: np.ndarray  # in raw residual space
    bias: float
    layer: int
    model_id: str
    train_spec: str
    seed: int
    train_texts: list[str] = field(default_factory=list)
    train_labels: list[int] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    diffmean: np.ndarray | None = None  # unit difference of means on the same training set

    def decision(self, features: np.ndarray) -> np.ndarray:
        scores: np.ndarray = np.asarray(features, dtype=np.float64) @ self.weight + self.bias
        return scores

    def predict_proba(self, features: np.ndarray) -> np.ndarray:
        proba: np.ndarray = 1.0 / (1.0 + np.exp(-self.decision(features)))
        return proba

    def predict(self, features: np.ndarray) -> np.ndarray:
        return (self.decision(features) > 0).astype(int)

    def predictor(self, name: str) -> float | None:
        """A held-out predictor of steering (one of PREDICTORS); None when not measured."""
        if name not in PREDICTORS:
            raise ProbeError(f"unknown predictor {name!r}; use one of {list(PREDICTORS)}")
        value = self.metrics.get(name)
        return None if value is None else float(value)

    def direction(self) -> np.ndarray:
        """Unit direction of the weight, signed so + points toward the concept."""
        norm = float(np.linalg.norm(self.weight))
        if norm == 0:
            raise ProbeError(f"the probe for {self.concept} has a zero weight; retrain it")
        return self.weight / norm

    def check_compatible(self, model_id: str, layer: int) -> None:
        if self.model_id != model_id or self.layer != layer:
            raise ProbeError(
                f"the classifier for {self.concept} was trained on {self.model_id} at layer "
                f"{self.layer}, but this run uses {model_id} at layer {layer}; run "
                "`make classifiers` (or `steer-eval classifiers`) with the same model and layer"
            )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["weight"] = [float(x) for x in self.weight]
        if self.diffmean is not None:
            data["diffmean"] = [float(x) for x in self.diffmean]
        return {"format": PROBE_FORMAT, **data}

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path) -> LinearProbe:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError as exc:
            raise ProbeError(f"no classifier at {path}; run `make classifiers`") from exc
        except json.JSONDecodeError as exc:
            raise ProbeError(f"{path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or data.pop("format", None) != PROBE_FORMAT:
            raise ProbeError(f"{path} is not a {PROBE_FORMAT} file")
        if "weight" not in data:
            raise ProbeError(f"{path} has no 'weight'; retrain with `make classifiers`")
        data["weight"] = np.asarray(data["weight"], dtype=np.float64)
        if data.get("diffmean") is not None:
            data["diffmean"] = np.asarray(data["diffmean"], dtype=np.float64)
        try:
            return cls(**data)
        except TypeError as exc:
            raise ProbeError(f"{path} has unexpected fields: {exc}") from exc


def train_probe(
    features: np.ndarray, labels: np.ndarray, *, seed: int, c: float = 1.0
) -> tuple[np.ndarray, float]:
    """Fit a seeded, class-balanced logistic regression; return (weight, bias) in raw space."""
    features = np.asarray(features, dtype=np.float64)
    labels = np.asarray(labels, dtype=int)
    if set(labels.tolist()) != {0, 1}:
        raise ValueError("a probe needs both positive (1) and negative (0) examples")
    center = features.mean(axis=0)
    centered = features - center
    scale = float(np.linalg.norm(centered, axis=1).mean()) or 1.0
    model = LogisticRegression(C=c, class_weight="balanced", random_state=seed, max_iter=5000)
    model.fit(centered / scale, labels)
    weight = model.coef_[0] / scale
    return weight, float(model.intercept_[0] - weight @ center)


def diffmean_direction(features: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Unit difference of means (positives minus the rest): the comparison vector source."""
    features = np.asarray(features, dtype=np.float64)
    labels = np.asarray(labels, dtype=int)
    diff = features[labels == 1].mean(axis=0) - features[labels == 0].mean(axis=0)
    unit: np.ndarray = diff / np.linalg.norm(diff)
    return unit


def train_separation(weight: np.ndarray, features: np.ndarray, labels: np.ndarray) -> float:
    """How far apart the training classes sit along the probe's unit direction.

    The gap between the class means of the projections, divided by the mean distance of
    the training activations from their centre, so it is scale-free and defined even at
    1x1x1 (one positive: no within-class spread to divide by). A cheap competitor to the
    held-out predictors in Phase 6: it needs no evaluation set.
    """
    features = np.asarray(features, dtype=np.float64)
    labels = np.asarray(labels, dtype=int)
    direction = np.asarray(weight, dtype=np.float64)
    direction = direction / np.linalg.norm(direction)
    projections = features @ direction
    gap = projections[labels == 1].mean() - projections[labels == 0].mean()
    spread = float(np.linalg.norm(features - features.mean(axis=0), axis=1).mean())
    return float(gap / spread) if spread > 0 else 0.0


def _scores_at(labels: np.ndarray, predicted: np.ndarray) -> dict[str, Any]:
    tn, fp, fn, tp = confusion_matrix(labels, predicted, labels=[0, 1]).ravel()
    return {
        "f1": float(f1_score(labels, predicted, zero_division=0)),
        "precision": float(precision_score(labels, predicted, zero_division=0)),
        "recall": float(recall_score(labels, predicted, zero_division=0)),
        "accuracy": float((predicted == labels).mean()),
        "confusion": {"tn": int(tn), "fp": int(fp), "fn": int(fn), "tp": int(tp)},
    }


def choose_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    """The decision threshold (predict 1 when score > t) that maximises F1 on ``scores``.

    F1 only changes where t crosses a score, so the candidates are the midpoints between
    consecutive distinct scores plus one point below the lowest and one above the highest
    (half the mean gap beyond them; 0.5 when all scores are equal). Ties between
    candidates go to the widest interval of equal predictions (the most margin on both
    sides), then to the lowest threshold. Meant for a validation split, never the test one.
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=int)
    if len(scores) == 0 or len(scores) != len(labels):
        raise ValueError("choose_threshold needs as many labels as scores, at least one")
    distinct = np.unique(scores)
    gaps = np.diff(distinct)
    pad = float(gaps.mean()) / 2 if len(gaps) else 0.5
    candidates = np.concatenate(
        [[distinct[0] - pad], (distinct[:-1] + distinct[1:]) / 2, [distinct[-1] + pad]]
    )
    widths = np.concatenate([[2 * pad], gaps, [2 * pad]])
    best = max(
        (float(f1_score(labels, (scores > t).astype(int), zero_division=0)), float(w), -float(t))
        for t, w in zip(candidates, widths, strict=True)
    )
    return -best[2]


def evaluate_probe(
    probe: LinearProbe,
    features: np.ndarray,
    labels: np.ndarray,
    validation: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Held-out metrics of a probe on a test set, with an optional validation split.

    Threshold-free: ``auroc`` and ``ap`` (average precision). At the fitted decision
    (> 0): ``f1_raw``, ``precision_raw``, ``recall_raw``, ``accuracy_raw``,
    ``confusion_raw``. At the threshold chosen on ``validation`` (features, labels) and
    applied to the test set: ``threshold``, ``f1_calibrated``, ``precision_calibrated``,
    ``recall_calibrated``, ``accuracy_calibrated``, ``confusion_calibrated`` (None without
    a validation split). Sizes: ``n_test_pos``, ``n_test_neg``, ``class_ratio`` (pos/neg),
    ``n_val_pos``, ``n_val_neg``.
    """
    labels = np.asarray(labels, dtype=int)
    scores = probe.decision(features)
    both = len(set(labels.tolist())) == 2
    n_pos, n_neg = int(labels.sum()), int((labels == 0).sum())
    out: dict[str, Any] = {
        "auroc": float(roc_auc_score(labels, scores)) if both else None,
        "ap": float(average_precision_score(labels, scores)) if n_pos else None,
    }
    for key, value in _scores_at(labels, (scores > 0).astype(int)).items():
        out[f"{key}_raw"] = value
    out.update(threshold=None, n_val_pos=0, n_val_neg=0)
    for key in ("f1", "precision", "recall", "accuracy", "confusion"):
        out[f"{key}_calibrated"] = None
    if validation is not None:
        val_features, val_labels = validation
        val_labels = np.asarray(val_labels, dtype=int)
        threshold = choose_threshold(probe.decision(val_features), val_labels)
        out["threshold"] = threshold
        out["n_val_pos"] = int(val_labels.sum())
        out["n_val_neg"] = int((val_labels == 0).sum())
        for key, value in _scores_at(labels, (scores > threshold).astype(int)).items():
            out[f"{key}_calibrated"] = value
    out.update(
        n_test_pos=n_pos,
        n_test_neg=n_neg,
        class_ratio=float(n_pos / n_neg) if n_neg else None,
        n_eval=len(labels),
    )
    return out
