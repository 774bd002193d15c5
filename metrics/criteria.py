"""The seed design's four success criteria as explicit pass/fail results.

The original research reported criteria computed from empty selections as NaN. Each
criterion here returns a CriterionResult whose status says whether it could be judged at
all, and metric_value() is a number only for pass (1.0) or fail (0.0), never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Literal, get_args

import numpy as np

from metrics.stats import Alpha, Correlation, Floats, NotEvaluable, pearson

Status = Literal["pass", "fail", "not_evaluable", "pending", "inconclusive", "panel_required"]
STATUSES: frozenset[str] = frozenset(get_args(Status))

C1_DIRECTION = "c1_direction"
C2_MAGNITUDE = "c2_magnitude"
C3_F1 = "c3_f1_correlation"
C4_HUMAN = "c4_human"
C4_PANEL = "c4_panel"
C4 = "c4_human_or_panel"
# Criterion 4 decided on the (cluster-bootstrap) interval of r rather than its point value.
V2_C4_HUMAN = "v2_c4_human"
V2_C4_PANEL = "v2_c4_panel"
V2_C4 = "v2_c4_human_or_panel"


@dataclass(frozen=True)
class CriterionResult:
    """One success criterion's verdict, the value it rests on and why."""

    key: str
    description: str
    status: Status
    value: float | None
    threshold: float
    reason: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Unknown status {self.status!r}; expected one of {sorted(STATUSES)}.")
        if self.value is not None and not math.isfinite(self.value):
            raise ValueError(f"{self.key}: value must be finite or None, got {self.value}.")

    @property
    def evaluable(self) -> bool:
        return self.status in {"pass", "fail"}

    def metric_value(self) -> float | None:
        """1.0 for pass, 0.0 for fail, None otherwise, so only a verdict gets logged."""
        return {"pass": 1.0, "fail": 0.0}.get(self.status)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _verdict(passed: bool) -> Status:
    return "pass" if passed else "fail"


def _as_arrays(*columns: Floats) -> list[np.ndarray]:
    arrays = [np.asarray(column, dtype=np.float64).ravel() for column in columns]
    if len({a.shape for a in arrays}) != 1:
        raise ValueError(f"Inputs must have the same length, got {[a.shape for a in arrays]}.")
    return arrays


def direction_criterion(
    strengths: Floats, shifts: Floats, min_fraction: float = 0.8
) -> CriterionResult:
    """C1: fraction of steered samples whose Δ moved the way the strength points.

    shifts are signed Δs − Δ0 per sample. A sample counts when sign(shift) == sign(s); a
    zero shift did not move and counts against. Samples with s = 0 are the baseline.
    """
    s, shift = _as_arrays(strengths, shifts)
    steered = s != 0
    description = f"Steering direction correct in at least {min_fraction:.0%} of steered samples"

    def result(status: Status, value: float | None, reason: str) -> CriterionResult:
        return CriterionResult(C1_DIRECTION, description, status, value, min_fraction, reason)

    if not np.any(steered):
        return result("not_evaluable", None, "no steered samples (every strength is 0)")
    if not np.all(np.isfinite(shift[steered])) or not np.all(np.isfinite(s)):
        return result("not_evaluable", None, "shifts or strengths contain NaN/inf")
    correct = np.sign(shift[steered]) == np.sign(s[steered])
    fraction = float(np.mean(correct))
    reason = f"{int(correct.sum())}/{int(steered.sum())} steered samples moved as expected"
    return result(_verdict(fraction >= min_fraction), fraction, reason)


def magnitude_criterion(
    strengths: Floats,
    magnitudes: Floats,
    at: float = 1.0,
    min_magnitude: float = 0.15,
) -> CriterionResult:
    """C2: mean |Δs − Δ0| over samples with |s| == at must exceed min_magnitude (strictly)."""
    s, mag = _as_arrays(strengths, magnitudes)
    description = f"Mean |Δs − Δ0| at strength ±{at:g} above {min_magnitude:g}"

    def result(status: Status, value: float | None, reason: str) -> CriterionResult:
        return CriterionResult(C2_MAGNITUDE, description, status, value, min_magnitude, reason)

    selected = np.isclose(np.abs(s), abs(at))
    present = sorted({float(v) for v in s})
    if not np.any(selected):
        return result(
            "not_evaluable",
            None,
            f"no samples at strength -{abs(at):g} or +{abs(at):g} (strengths present: {present})",
        )
    chosen = mag[selected]
    if not np.all(np.isfinite(chosen)):
        return result("not_evaluable", None, "magnitudes contain NaN/inf")
    mean = float(np.mean(chosen))
    signs = {"+" if v > 0 else "-" for v in s[selected]}
    note = "" if len(signs) == 2 else f"; only {signs.pop()}{abs(at):g} present"
    reason = f"mean over {int(selected.sum())} samples{note}"
    return result(_verdict(mean > min_magnitude), mean, reason)


def f1_criterion(
    f1_by_concept: Mapping[str, float],
    magnitude_by_concept: Mapping[str, float],
    min_r: float = 0.5,
    predictor: str = "F1",
) -> CriterionResult:
    """C3: Pearson r between the classifier's predictor (the seed's F1 by default) and
    mean steering magnitude across concepts."""
    description = f"Classifier {predictor} predicts steering magnitude (Pearson r > {min_r:g})"
    concepts = sorted(set(f1_by_concept) & set(magnitude_by_concept))
    dropped = sorted(set(f1_by_concept) ^ set(magnitude_by_concept))
    note = f"; concepts without both values skipped: {dropped}" if dropped else ""
    corr = pearson(
        [f1_by_concept[c] for c in concepts], [magnitude_by_concept[c] for c in concepts]
    )
    if isinstance(corr, NotEvaluable):
        return CriterionResult(
            C3_F1, description, "not_evaluable", None, min_r, f"correlation: {corr.reason}{note}"
        )
    reason = (
        f"r = {corr.r:.3f}, 95% CI [{corr.ci_low:.3f}, {corr.ci_high:.3f}], "
        f"p = {corr.p_value:.3g}, n = {corr.n} concepts{note}"
    )
    return CriterionResult(C3_F1, description, _verdict(corr.r > min_r), corr.r, min_r, reason)


def human_criterion(
    correlation: Correlation | NotEvaluable | None, pass_r: float = 0.7, panel_r: float = 0.5
) -> CriterionResult:
    """C4 (human part): Pearson r between human ratings and Δ.

    No ratings yet -> pending; r > pass_r -> pass; r < panel_r -> panel_required (the
    seed's trigger for the multi-model panel); in between -> inconclusive.
    """
    description = f"Human ratings agree with Δ (Pearson r > {pass_r:g})"

    def result(status: Status, value: float | None, reason: str) -> CriterionResult:
        return CriterionResult(C4_HUMAN, description, status, value, pass_r, reason)

    if correlation is None:
        return result("pending", None, "no human ratings collected yet")
    if isinstance(correlation, NotEvaluable):
        return result("not_evaluable", None, f"correlation: {correlation.reason}")
    r = correlation.r
    reason = f"r = {r:.3f}, 95% CI [{correlation.ci_low:.3f}, {correlation.ci_high:.3f}]"
    if r > pass_r:
        return result("pass", r, reason)
    if r < panel_r:
        return result("panel_required", r, f"{reason}; below {panel_r:g}, run the model panel")
    return result("inconclusive", r, f"{reason}; between {panel_r:g} and {pass_r:g}")


def _alpha_value(alpha: float | Alpha | NotEvaluable | None) -> float | str:
    """The alpha as a float, or the reason it is missing."""
    if alpha is None:
        return "panel alpha missing"
    if isinstance(alpha, NotEvaluable):
        return f"alpha: {alpha.reason}"
    value = alpha.value if isinstance(alpha, Alpha) else float(alpha)
    return value if math.isfinite(value) else "alpha is not finite"


def _r_value(r: float | Correlation | NotEvaluable | None) -> float | str:
    """The correlation as a float, or the reason it is missing."""
    if r is None:
        return "panel-vs-Δ correlation missing"
    if isinstance(r, NotEvaluable):
        return f"panel-vs-Δ correlation: {r.reason}"
    value = r.r if isinstance(r, Correlation) else float(r)
    return value if math.isfinite(value) else "panel-vs-Δ correlation is not finite"


def panel_criterion(
    alpha: float | Alpha | NotEvaluable | None,
    r_panel_delta: float | Correlation | NotEvaluable | None,
    min_alpha: float = 0.667,
    min_r: float = 0.7,
) -> CriterionResult:
    """C4 (panel part): judges agree with each other (alpha >= min_alpha) and with Δ (r > min_r)."""
    description = (
        f"Model panel agrees (Krippendorff alpha >= {min_alpha:g} and r(panel, Δ) > {min_r:g})"
    )
    a, r = _alpha_value(alpha), _r_value(r_panel_delta)
    missing = [item for item in (a, r) if isinstance(item, str)]
    if missing:
        return CriterionResult(
            C4_PANEL, description, "not_evaluable", None, min_r, "; ".join(missing)
        )
    assert isinstance(a, float) and isinstance(r, float)
    passed = a >= min_alpha and r > min_r
    reason = f"alpha = {a:.3f} (min {min_alpha:g}), r = {r:.3f} (min {min_r:g})"
    return CriterionResult(C4_PANEL, description, _verdict(passed), r, min_r, reason)


def combine_criterion4(
    human: CriterionResult, panel: CriterionResult | None = None
) -> CriterionResult:
    """Final C4: human pass wins; otherwise an evaluable panel decides; else human's status."""
    description = "Human validation passes OR the multi-model panel agrees"
    if human.status == "pass":
        chosen, source = human, "human"
    elif panel is not None and panel.evaluable:
        chosen, source = panel, "panel"
    else:
        chosen, source = human, "human"
        if panel is not None:
            source = f"human (panel {panel.status}: {panel.reason})"
    return replace(
        chosen, key=C4, description=description, reason=f"from {source}: {chosen.reason}"
    )


def _interval_text(corr: Correlation) -> str:
    return f"r = {corr.r:.3f}, 95% CI [{corr.ci_low:.3f}, {corr.ci_high:.3f}] ({corr.method})"


def human_criterion_v2(
    correlation: Correlation | NotEvaluable | None, pass_r: float = 0.7
) -> CriterionResult:
    """C4 v2 (human part), decided on r's interval: pass when it lies above ``pass_r``,
    fail when below, inconclusive when it straddles the threshold."""
    description = f"Human ratings agree with Δ (the CI of Pearson r above {pass_r:g})"

    def result(status: Status, value: float | None, reason: str) -> CriterionResult:
        return CriterionResult(V2_C4_HUMAN, description, status, value, pass_r, reason)

    if correlation is None:
        return result("pending", None, "no human ratings collected yet")
    if isinstance(correlation, NotEvaluable):
        return result("not_evaluable", None, f"correlation: {correlation.reason}")
    reason = _interval_text(correlation)
    if correlation.ci_low > pass_r:
        return result("pass", correlation.r, reason)
    if correlation.ci_high < pass_r:
        return result("fail", correlation.r, reason)
    return result("inconclusive", correlation.r, f"{reason}; the interval contains {pass_r:g}")


def panel_criterion_v2(
    alpha: float | Alpha | NotEvaluable | None,
    r_panel_delta: Correlation | NotEvaluable | None,
    min_alpha: float = 0.667,
    min_r: float = 0.7,
) -> CriterionResult:
    """C4 v2 (panel part): judges agree (alpha >= min_alpha, a point value: the panel
    rates one set of texts) and the CI of r(panel mean, Δ) lies above ``min_r``."""
    description = (
        f"Model panel agrees (Krippendorff alpha >= {min_alpha:g} and the CI of "
        f"r(panel, Δ) above {min_r:g})"
    )
    a = _alpha_value(alpha)
    if r_panel_delta is None or isinstance(r_panel_delta, NotEvaluable) or isinstance(a, str):
        missing = [m for m in (a, _r_value(r_panel_delta)) if isinstance(m, str)]
        return CriterionResult(
            V2_C4_PANEL, description, "not_evaluable", None, min_r, "; ".join(missing)
        )
    corr = r_panel_delta
    reason = f"alpha = {a:.3f} (min {min_alpha:g}), {_interval_text(corr)}"
    if a < min_alpha or corr.ci_high < min_r:
        status: Status = "fail"
    elif corr.ci_low > min_r:
        status = "pass"
    else:
        status = "inconclusive"
    return CriterionResult(V2_C4_PANEL, description, status, corr.r, min_r, reason)


def combine_criterion4_v2(
    human: CriterionResult, panel: CriterionResult | None = None
) -> CriterionResult:
    """C4 v2 = human OR panel on intervals: pass when either passes; inconclusive when
    neither passes and one is inconclusive; fail when the evaluated parts all fail;
    otherwise the human part's status (pending or not evaluable)."""
    description = "Human validation OR the model panel, decided on intervals"
    parts = [human] + ([panel] if panel is not None and panel.status != "not_evaluable" else [])
    order = ("pass", "inconclusive", "fail")
    chosen = next((p for status in order for p in parts if p.status == status), human)
    source = "human" if chosen is human else "panel"
    reason = f"from {source}: {chosen.reason}"
    return replace(chosen, key=V2_C4, description=description, reason=reason)
