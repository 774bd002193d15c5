"""The identification study's answer, from its :class:`~experiments.record.IdentifyRecord`.

The pre-registered primary analysis is the headline verdict (pass: supported, its
interval on the hypothesis' side of 0); the pooled and per-manipulation AUROC slopes
beside cos(v, v*) follow as exploratory rows, then the prompting baseline.
"""

from __future__ import annotations

from experiments.answer import Answer, Verdict
from experiments.record import Estimate, IdentifyRecord

PRIMARY_STATUS = {
    "supported": "pass",
    "contradicted": "fail",
    "inconclusive": "inconclusive",
    "not_evaluable": "not_evaluable",
}


def zero_status(e: Estimate) -> str:
    """pass: interval above 0; fail: below; otherwise inconclusive."""
    if e.estimate is None or e.low is None or e.high is None:
        return "not_evaluable"
    return "pass" if e.low > 0 else "fail" if e.high < 0 else "inconclusive"


def _row(key: str, label: str, group: str, e: Estimate, **extra) -> Verdict:
    return Verdict(
        key=key,
        label=label,
        group=group,
        value=e.estimate,
        low=e.low,
        high=e.high,
        status=extra.pop("status", None) or zero_status(e),
        threshold=0.0,
        method=e.method,
        n=e.n_clusters or None,
        reason=extra.pop("reason", e.reason),
        **extra,
    )


def verdicts(record: IdentifyRecord) -> list[Verdict]:
    out = []
    primary = record.primary
    if primary is not None:
        spec = primary.spec
        worth = "confirmatory" if record.label.startswith("confirmatory") else "not confirmatory"
        verdict = primary.verdict.replace("_", " ")
        positive = spec.get("hypothesis", "positive") == "positive"
        out.append(
            _row(
                "primary",
                f"slope of {spec.get('outcome')} on {spec.get('predictor')} beside "
                f"{spec.get('control')} (pre-registered)",
                f"primary analysis ({worth})",
                primary.slope,
                status=PRIMARY_STATUS[primary.verdict],
                reason=primary.verdict,
                claim=f"detection quality predicts the effect ({verdict})",
                symbol="slope ",
                direction="above" if positive else "below",
                description=f"hypothesis {spec.get('hypothesis')}; {record.label}",
            )
        )
    pooled = record.pooled
    out.append(
        _row(
            "pooled/slope_auroc",
            "slope of the effect on AUROC",
            "pooled (exploratory)",
            pooled.slope_auroc,
        )
    )
    if "auroc" in pooled.partial:
        out.append(
            _row(
                "pooled/partial/auroc",
                "AUROC slope beside cos(v, v*)",
                "pooled (exploratory)",
                pooled.partial["auroc"],
                claim="" if primary is not None else "detection adds to cos(v, v*)",
                symbol="slope ",
            )
        )
    for m, result in record.manipulations.items():
        if "auroc" in result.partial:
            out.append(
                _row(
                    f"{m}/partial/auroc",
                    "AUROC slope beside cos(v, v*)",
                    f"{m} (exploratory)",
                    result.partial["auroc"],
                )
            )
    interval = record.baseline.interval
    if interval is not None:
        out.append(
            _row(
                "prompt_baseline",
                "prompting baseline: likelihood effect (reference)",
                "baseline",
                interval,
                description="asking for the concept in the prompt instead of steering",
            )
        )
    return out


def answer_of(record: IdentifyRecord, figures: tuple[str, ...] = ()) -> Answer:
    notes = [f"This run is {record.label}."]
    het = record.pooled.heterogeneity
    if het.evaluable and het.p_value is not None and het.wald is not None:
        differs = "differs" if het.p_value < 0.05 else "shows no detectable difference"
        notes.append(
            f"The AUROC slope {differs} between manipulations (Wald χ²({het.df}) = "
            f"{het.wald:.1f}, p = {het.p_value:.3g})."
        )
    n = len(record.betas)
    return Answer(
        phase="identify",
        run_id=record.run_id,
        question=(
            "When detection quality is varied on its own around a reference direction v*, "
            "does a direction's detection quality (each direction scored as its own "
            f"detector) predict its steering effect ({record.outcome})? Within concepts; "
            f"{n} {record.concept_set} concepts, {record.model_id} at layer {record.layer}."
        ),
        confidence=0.95,
        verdicts=verdicts(record),
        notes=notes,
        figures=figures,
    )
