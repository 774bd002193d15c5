"""The identification study's answer, from its :class:`~experiments.record.IdentifyRecord`.

The pre-registered primary analysis is the headline verdict (pass: supported, its
interval on the hypothesis' side of 0) and names its estimator (v1: a straight line in
cos; v2: identify/estimation/estimator.py); the v2 estimator's slopes, then the pooled and
per-manipulation AUROC slopes beside cos(v, v*) follow as exploratory rows, then the
prompting baseline.
"""

from __future__ import annotations

from typing import Any

from experiments.answer import Answer, Verdict
from experiments.identify.measures import OUTCOMES
from experiments.record import EstimandResult, IdentifyRecord
from experiments.record.identified import AUROC, MATCHED
from metrics.intervals import Interval, not_evaluable

PRIMARY_STATUS = {
    "supported": "pass",
    "contradicted": "fail",
    "no_practical_effect": "fail",  # the interval inside ±margin: the reason says so
    "inconclusive": "inconclusive",
    "not_evaluable": "not_evaluable",
}
ESTIMANDS_GROUP = "estimands (each its own question; exploratory unless primary)"


def zero_status(e: Interval) -> str:
    """pass: interval above 0; fail: below; otherwise inconclusive."""
    if e.estimate is None or e.low is None or e.high is None:
        return "not_evaluable"
    return "pass" if e.low > 0 else "fail" if e.high < 0 else "inconclusive"


def _row(key: str, label: str, group: str, e: Interval, **extra: Any) -> Verdict:
    reason = extra.pop("reason", e.reason)
    return Verdict(
        key=key,
        label=label,
        group=group,
        interval=Interval(e.estimate, e.low, e.high, e.n, e.n_clusters, e.method, reason),
        status=extra.pop("status", None) or zero_status(e),
        threshold=0.0,
        n=e.n_clusters or None,
        **extra,
    )


ESTIMATOR_WORDS = {
    "linear_cos": "v1: concept fixed effects, a straight line in cos",
    "flexible_cos": "v2: (concept, manipulation) fixed effects, a spline in cos per manipulation",
    "equal_geometry": "v3: random iso-cos nuisances, within (concept, angle, band), bare",
    "practitioner": "v3: the directions people build, one β, within concept, bare",
    "practitioner_full_data": "v4's P2: the directions built from the full training set, "
    "one β, within concept, bare",
}


def estimand_row(name: str, e: EstimandResult) -> Verdict:
    """An estimand (identify/estimation/estimands.py), named, with its question; one this
    run could not or did not measure says why."""
    where = f"{e.population}; {e.operating_point}"
    if e.fit is not None:
        return _row(f"estimand/{name}", f"{name}: {e.question}", ESTIMANDS_GROUP, e.fit,
                    symbol="slope ", description=where)  # fmt: skip
    return Verdict(
        key=f"estimand/{name}", label=f"{name}: {e.question}",
        group=ESTIMANDS_GROUP, threshold=0.0, status="not_evaluable",
        interval=not_evaluable(e.reason or e.status.replace("_", " ")), description=where,
    )  # fmt: skip


V2_GROUP = "identified: v2 estimator (exploratory)"


def identified_rows(record: IdentifyRecord) -> list[Verdict]:
    """The v2 estimator's slopes (identify/estimation/estimator.py), when the record has them."""
    ident = record.identified
    if ident is None:
        return []
    names = {"auroc": "AUROC", "probit_auroc": "probit(AUROC)"}
    sub, iso, free = ident.subset, ident.iso_cos, ident.name_free
    # (key, label, slope, description), in the answer's order: a row where there is a slope
    rows: list[tuple[str, str, Interval | None, str]] = [
        (
            f"identified/flexible/{p}",
            f"slope on {names.get(p, p)} beside a spline in cos per manipulation",
            fit,
            ident.model,
        )
        for p, fit in ident.flexible.items()
    ]
    rows += [
        (
            "identified/iso_cos/auroc",
            "iso-cos: slope on AUROC at equal cos(v, v*), beside the nuisance's own effect",
            iso.pooled,
            "within (concept, angle); covariates: " + ", ".join(iso.covariates),
        ),
        (
            "identified/given_dose/auroc",
            "slope on AUROC beside the spline in cos and log next-token KL (the dose)",
            ident.given_dose.get(AUROC),
            "",
        ),
        (
            "identified/name_free/auroc",
            "slope on the AUROC of name-free test positives beside a spline in cos",
            free.auroc_name_free if free else None,
            "positives that name only what falls under the concept",
        ),
    ]
    headlines = [("matched", "at each direction's KL-matched dose", sub.dose.get(MATCHED))]
    for key, measure in OUTCOMES.items():  # each declared outcome: its last detector's slope
        if key in sub.outcomes:
            stored = sub.outcomes[key].slopes.get(measure.detectors[-1])
            headlines.append((key, measure.answer or measure.label, stored))
    stratified = "every direction of a subset stratified by v*'s AUROC"
    at = f"subset of {len(sub.concepts)} concepts: slope on AUROC"
    rows += [
        (f"identified/subset/{k}", f"{at} {what}", fit, stratified) for k, what, fit in headlines
    ]
    pairs = ident.matched_pairs.get(AUROC)
    if pairs is not None:
        rows += [
            (
                "identified/matched_pairs/auroc",
                f"matched pairs (|Δcos| ≤ {pairs.tolerance:g}): Δeffect on ΔAUROC",
                pairs.fit,
                f"{pairs.n_pairs} pairs of directions from different manipulations, "
                f"{pairs.n_concepts} concepts",
            )
        ]
    return [
        _row(key, label, V2_GROUP, fit, symbol="slope ", description=where)
        for key, label, fit, where in rows
        if fit is not None
    ]


CONTROL_WORDS = {"cos_ref": "cos(v, v*)", "log_kl": "log next-token KL (the dose)"}


def _controls(names: list[str]) -> str:
    return " and ".join(CONTROL_WORDS.get(c, c) for c in names if c != "none") or "nothing"


def verdicts(record: IdentifyRecord) -> list[Verdict]:
    out = []
    primary = record.primary
    if primary is not None:
        spec = primary.spec
        worth = "confirmatory" if record.label.startswith("confirmatory") else "not confirmatory"
        verdict = primary.verdict.replace("_", " ")
        hypothesis = spec.hypothesis
        model = ESTIMATOR_WORDS.get(primary.estimator, primary.estimator)
        estimand = spec.estimand
        margin = spec.equivalence_margin
        named = f"{estimand}: " if estimand else ""
        bounds = f"; no practical effect inside ±{margin}" if margin else ""
        out.append(
            _row(
                "primary",
                f"{named}slope of {spec.outcome} on {spec.predictor} beside "
                f"{_controls(spec.controls)} (pre-registered; {model}{bounds})",
                f"primary analysis ({worth})",
                primary.slope,
                status=PRIMARY_STATUS[primary.verdict],
                reason=primary.verdict,
                claim=f"detection quality predicts the effect ({verdict})",
                symbol="slope ",
                direction="above" if hypothesis == "positive" else "below",
                description=f"hypothesis {hypothesis}; {record.label}",
            )
        )
    out += [estimand_row(name, e) for name, e in record.estimands.items()]
    out += identified_rows(record)
    pooled, group = record.pooled, "pooled (exploratory)"
    out.append(
        _row("pooled/slope_auroc", "slope of the effect on AUROC", group, pooled.slope_auroc)
    )
    if pooled.partial.auroc is not None:
        out.append(
            _row(
                "pooled/partial/auroc",
                "AUROC slope beside cos(v, v*)",
                group,
                pooled.partial.auroc,
                claim="" if primary is not None else "detection adds to cos(v, v*)",
                symbol="slope ",
            )
        )
    for m, result in record.manipulations.items():
        if result.partial.auroc is not None:
            out.append(
                _row(
                    f"{m}/partial/auroc",
                    "AUROC slope beside cos(v, v*)",
                    f"{m} (exploratory)",
                    result.partial.auroc,
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
    ident = record.identified
    het2 = ident.heterogeneity_given_cos if ident is not None else None
    if het2 is not None and het2.evaluable and het2.F is not None and het2.p_value is not None:
        notes.append(
            f"Given the spline in cos, the AUROC slopes of the manipulations "
            f"{'differ' if het2.p_value < 0.05 else 'show no detectable difference'} "
            f"(F({het2.df}, {het2.df_denominator}) = {het2.F:.2f}, "
            f"p = {het2.p_value:.3g}; not identified in: "
            f"{', '.join(het2.not_identified) or 'none'})."
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
