"""Phase 6's answer, from its :class:`~experiments.record.CalibrationRecord` alone.

Per sign, layer and direction source, the main predictor's mixed-model slope is a
verdict (pass: its interval above 0); the minimum effective level is a note beside it.
"""

from __future__ import annotations

from experiments.answer import SIGN_LABELS, Answer, Verdict, estimate_text
from experiments.record import CalibrationRecord, CurveFit

FIGURES = ("predictor_vs_effect.png", "effect_vs_training_size.png", "predictor_comparison.png")


def group(fit: CurveFit) -> str:
    return f"{SIGN_LABELS[fit.sign]}, {fit.source} (L{fit.layer})"


def slope_status(fit: CurveFit) -> str:
    mm = fit.mixed_model
    if not mm.evaluable or mm.low is None or mm.high is None:
        return "not_evaluable"
    return "pass" if mm.low > 0 else "fail" if mm.high < 0 else "inconclusive"


def verdict(fit: CurveFit) -> Verdict:
    mm = fit.mixed_model
    return Verdict(
        key=f"slope/L{fit.layer}/{fit.source}/{fit.predictor}/{fit.sign}",
        label=f"slope of the effect above null on {fit.predictor}",
        group=group(fit),
        interval=mm,
        status=slope_status(fit),
        threshold=0.0,
        n=mm.n_clusters or None,
        claim="detection quality predicts the effect",
        symbol="slope ",
        sign=fit.sign,
    )


def minimum_note(fit: CurveFit, threshold: float) -> str:
    m = fit.minimum_effective
    if m.level is not None:
        where = f"{estimate_text(m.level.estimate, m.level.low, m.level.high, '.3f')} at {m.size}"
        return f"{group(fit)}: minimum effective {fit.predictor} {where}."
    return f"{group(fit)}: no training size reached an effect above {threshold:g}."


def answer_of(record: CalibrationRecord) -> Answer:
    main = record.main_predictor
    fits = [f for f in record.results if f.predictor == main]
    return Answer(
        phase="calibration",
        run_id=record.run_id,
        question=(
            f"Along a training curve, does a probe's detection quality ({main}) predict how "
            "strongly its direction steers beyond random directions (the effect above null), "
            "and from which quality on is steering effective? Mixed model with a random "
            "intercept per concept; pass when the slope's interval lies above 0."
        ),
        confidence=0.95,
        verdicts=[verdict(f) for f in fits],
        notes=[minimum_note(f, record.threshold) for f in fits],
        figures=FIGURES,
    )
