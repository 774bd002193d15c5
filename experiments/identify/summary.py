"""The identification run's findings and summary, as markdown (the MLflow description),
read from the typed record (``IdentifyRecord``). Blocks the record keeps open (the iso-cos
design, the subset, the name-free outcome, the per-manipulation F test, the validation
against generated texts, the between-concept correlation and a re-analysed Phase 6 run)
are read as the dicts they are stored as."""

from __future__ import annotations

from typing import TYPE_CHECKING

# The one formatter of every answer and summary (experiments/answer.py), short names here.
from experiments.answer import estimate_text
from experiments.answer import number as fmt
from experiments.identify.stages.manipulations import family
from experiments.kernel.outcomes import Estimator
from experiments.record import OutcomeSlopes, SubsetAgreement, SubsetResult
from experiments.record.identified import AUROC, PROBIT_AUROC
from experiments.rows import finite
from metrics.intervals import Interval

if TYPE_CHECKING:
    from experiments.record import (
        EstimandResult,
        IdentifiedResult,
        IdentifyRecord,
        ManipulationResult,
        MinimumLevel,
    )


def est(e: Interval | None, spec: str = "+.3f") -> str:
    """:func:`~experiments.answer.estimate_text` of a typed interval, its non-finite
    numbers read as missing (as the record's JSON holds them)."""
    if e is None:
        return estimate_text(None, spec=spec)
    return estimate_text(finite(e.estimate), finite(e.low), finite(e.high), spec, e.reason)


def excludes_zero(iv: Interval | None) -> bool:
    if iv is None:
        return False
    low, high = finite(iv.low), finite(iv.high)
    return low is not None and high is not None and (low > 0 or high < 0)


def level_text(m: MinimumLevel) -> str:
    status, level = m.status, m.level or Interval()
    if status == "reached" and level.estimate is not None:
        if level.low is None or level.high is None:
            return f"{level.estimate:.3f} [interval: censored on one side in most replicates]"
        left = f"≤ {level.low:.3f}" if m.low_open else f"{level.low:.3f}"
        right = f"> {level.high:.3f}" if m.high_open else f"{level.high:.3f}"
        return f"{level.estimate:.3f} [{left}, {right}]"
    if status == "censored_below" and level.estimate is not None:
        return f"censored (≤ {level.estimate:.3f}, the lowest AUROC tested)"
    if status == "not_reached" and m.tested:
        return f"censored (not reached by {m.tested[1]:.3f}, the highest tested)"
    return f"n/a ({m.note or m.reason or status})"


def estimand_lines(estimands: dict[str, EstimandResult]) -> list[str]:
    """Each estimand under its own name (identify/estimation/estimands.py), with its question."""
    lines = []
    for name, e in estimands.items():
        shown = est(e.fit) if e.fit is not None else f"not estimated ({e.reason})"
        fix = e.correction
        if fix is not None:
            rel, bare = fix.auroc_reliability, fix.uncorrected
            left = fix.beyond_geometry
            shown += (
                " (corrected for measurement error: AUROC's reliability inside the cells "
                f"{'n/a' if rel is None else f'{rel:.2f}'}, the cosine to the second half's "
                f"diffmean at reliability {fix.cos_reliability or 'n/a'}; uncorrected "
                f"{'n/a' if bare is None else f'{bare:+.2f}'}; AUROC's within-cell variance "
                "reliable and beyond the true geometry: "
                f"{'n/a' if left is None else f'{left:+.2f}'} of the observed)"
            )
        lines.append(f"- **{name}** — {e.question} {shown}.")
    return lines


def identified_lines(ident: IdentifiedResult | None) -> list[str]:
    """The v2 estimator (identify/estimation/estimator.py): flexible slopes, v1's model under the
    same inference, matched pairs, and the per-manipulation slopes' F test."""
    if ident is None:
        return []
    flex = ident.flexible
    lines = [
        f"- Identified (v2: {ident.model}; wild cluster bootstrap-t): the AUROC slope is "
        f"{est(flex.get(AUROC))}, the probit(AUROC) slope {est(flex.get(PROBIT_AUROC))}; "
        f"v1's straight line in cos under the same inference gives "
        f"{est(ident.linear_cos.get(AUROC))}."
    ]
    dosed = ident.given_dose.get(AUROC)
    if dosed:
        lines.append(
            f"- With the dose held as a covariate (log next-token KL of each direction at its "
            f"β): the AUROC slope is {est(dosed)}."
        )
    iso = ident.iso_cos
    if iso.evaluable:
        angles = "; ".join(
            f"{a}°: {est(r.slope)} (without covariates {est(r.without_covariates)}, "
            f"AUROC spread sd {r.auroc_spread or 0:.3f})"
            for a, r in iso.angles.items()
        )
        lines.append(
            f"- Iso-cos (AUROC varied at fixed cos(v, v*), within (concept, angle), beside "
            f"{', '.join(iso.covariates)}): pooled {est(iso.pooled)}; {angles}."
        )
    dose = ident.by_strength
    if dose:
        lines.append(
            "- The AUROC slope (flexible) at each strength × β: "
            + "; ".join(f"{s}×: {est(f)}" for s, f in dose.items())
            + "."
        )
    free = ident.name_free
    if free is not None and free.auroc_name_free is not None:
        lines.append(
            f"- Detection without the name (AUROC on name-free test positives: texts naming only "
            f"what falls under the concept; r = {fmt(free.r_auroc, '+.2f')} with the named "
            f"AUROC): the flexible slope is {est(free.auroc_name_free)}."
        )
    lines += subset_lines(ident.subset)
    pairs = ident.matched_pairs.get(AUROC)
    if pairs is not None and pairs.evaluable:
        lines.append(
            f"- Matched pairs (directions of one concept from different manipulations, "
            f"|Δcos| ≤ {pairs.tolerance:g}; {pairs.n_pairs} pairs, "
            f"{pairs.n_concepts} concepts): Δeffect on ΔAUROC {est(pairs.fit)}."
        )
    het = ident.heterogeneity_given_cos
    slopes = ", ".join(
        f"{m} {est(f)}" if f.estimate is not None else f"{m} not identified"
        for m, f in het.slopes.items()
    )
    if het.evaluable:
        lines.append(
            f"- Per manipulation, beside its own spline in cos: {slopes}; equal slopes: "
            f"F({het.df}, {het.df_denominator}) = {fmt(het.F, '.2f')}, "
            f"p = {fmt(het.p_value, '.3g')} (χ² reference {fmt(het.p_value_chi2, '.3g')})."
        )
    elif slopes:
        lines.append(f"- Per manipulation, beside its own spline in cos: {slopes}.")
    return lines


def matched_text(sub: SubsetResult) -> str:
    """How well the subset's doses matched: the share within 10% of v*'s KL on the prompts
    the bisection ran on and, where verified (``identify.dose_verify``), on held-apart
    prompts; the sentence's end."""
    if sub.matched_share is None:
        return "."
    kl = "next-token KL"
    if sub.matched_on == "concept_free":
        kl += " with the concept's own tokens left out"
    text = (
        f" (matched: each direction's β bisected to v*'s {kl}, {sub.matched_share:.0%} within 10%"
    )
    if sub.matched_share_verify is not None:
        text += (
            f" on the prompts it was bisected on, {sub.matched_share_verify:.0%} on "
            f"held-apart prompts, median |Δlog KL| {sub.verify_gap_median or 0:.2f}"
        )
    return text + ")."


def outcome_line(key: str, result: OutcomeSlopes) -> str:
    """One declared outcome on the subset (``measures.py``), in its declaration's words:
    its slope on each detection column, beside log KL, and its agreement."""
    from experiments.identify.measures import DETECTOR_WORDS, OUTCOMES

    measure = OUTCOMES[key]
    fits = [result.slopes.get(d) for d in measure.detectors]
    if len(fits) == 1:
        text = f"the AUROC slope (flexible) is {est(fits[0])}"
    else:
        text = "the slope on " + ", on ".join(
            f"{DETECTOR_WORDS.get(d, d)} {'is ' if i == 0 else ''}{est(f)}"
            for i, (d, f) in enumerate(zip(measure.detectors, fits, strict=True))
        )
    if Estimator.GIVEN_DOSE in measure.estimators:
        text += f", beside log KL {est(result.given_dose)}"
    if Estimator.AGREEMENT in measure.estimators:
        agree = result.agreement or SubsetAgreement()
        text += (
            f"; the two outcomes agree within concepts at r = {est(agree.all)} over all "
            f"directions and {est(agree.good)} over good ones (cos ≥ 0.7, {agree.good_n} "
            "cells)"
        )
    return f"- {measure.label}: {text}."


def subset_lines(sub: SubsetResult) -> list[str]:
    """The stratified subset: the dose held by design and each declared outcome."""
    if not sub.concepts:
        return []
    n = len(sub.concepts)
    doses = "; ".join(f"{k}: {est(f)}" for k, f in sub.dose.items())
    lines = [
        f"- Subset of {n} concepts (stratified by v*'s AUROC; exploratory): the AUROC slope "
        f"(flexible) at 1× β is {est(sub.likelihood_1x)}; at other doses {doses}"
        + matched_text(sub)
    ]
    from experiments.identify.measures import OUTCOMES

    lines += [outcome_line(key, sub.outcomes[key]) for key in OUTCOMES if key in sub.outcomes]
    return lines


def findings(record: IdentifyRecord) -> list[str]:
    pooled = record.pooled
    partial = pooled.partial.auroc
    alone = pooled.slope_auroc
    het = pooled.heterogeneity
    lines = ["## Findings", ""]
    lines.append(
        f"- Within concepts, over every manipulated direction, the effect rises by "
        f"{est(alone)} nats/token per unit AUROC; with cos(direction, v*) held fixed the AUROC "
        f"slope is {est(partial)} — detection "
        + (
            "still adds to cos(direction, v*)."
            if excludes_zero(partial) and partial is not None and (partial.estimate or 0) > 0
            else "adds nothing detectable once cos(direction, v*) is known."
            if not excludes_zero(partial)
            else "goes against steering once cos(direction, v*) is known."
        )
    )
    if het.evaluable and het.p_value is not None and het.wald is not None:
        differs = "differs" if het.p_value < 0.05 else "shows no detectable difference"
        lines.append(
            f"- v1: the AUROC slope {differs} between manipulations (Wald χ²({het.df}) = "
            f"{het.wald:.1f}, p = {het.p_value:.3g}; slopes: "
            + ", ".join(f"{m} {v:+.2f}" for m, v in het.slopes.items())
            + ")."
        )
    if pooled.ranking:
        lines.append(
            "- Predictors by within-concept |r| with the effect: "
            + ", ".join(
                f"{r.predictor} {r.within_r:+.2f} (first in {r.p_first:.0%})"
                for r in pooled.ranking
            )
            + "."
        )
    primary = record.primary
    if primary is not None:
        spec = primary.spec
        lines.append(
            f"- Primary analysis ({record.label}; estimand "
            f"{spec.estimand or 'not named'}): slope of {spec.outcome} on "
            f"{spec.predictor} beside {spec.control}, hypothesis "
            f"{spec.hypothesis}: "
            f"{est(primary.slope)} → **{primary.verdict}**."
        )
        if primary.manipulations is not None:
            lines.append(
                "  Its rows: " + ", ".join(primary.manipulations) + "; nulls left out: "
                + (", ".join(primary.left_out or []) or "none") + "."
            )  # fmt: skip
    lines += estimand_lines(record.estimands)
    rel = record.outcome_reliability
    if rel:
        lines.append(
            "- Split-half reliability where directions are compared (within concepts among "
            "cos ≥ 0.7, among the directions people build; within equal-geometry cells): "
            + "; ".join(f"{k.replace('_', ' ')} {est(v)}" for k, v in rel.items())
            + "."
        )
    lines += identified_lines(record.identified)
    lines.append(
        "- Everything in this summary except the primary analysis is exploratory (H2–H5 of "
        "the pre-registration included)."
    )
    validation = record.validation
    if validation.evaluable and validation.within is not None:
        lines.append(
            f"- Likelihood outcome against generated texts (Δ, gated): r over cells "
            f"{est(validation.pooled_r)}, within concepts {est(validation.within.observed)} "
            f"(disattenuated {est(validation.within.corrected)})."
        )
    res = record.resources
    if res.model_dump():
        lines.append(
            f"- Wall time {(res.wall_seconds or 0) / 60:.1f} min; peak memory "
            f"{res.peak_rss_mib or 0:.0f} MiB"
            + (f", GPU {res.peak_gpu_mib:.0f} MiB" if res.peak_gpu_mib is not None else "")
            + "."
        )
    return lines


def _level_at(r: ManipulationResult, fraction: float) -> str:
    """The minimum effective level at one fraction of the effect, n/a where none was read."""
    return next((level_text(x) for x in r.minimum_effective if x.fraction == fraction), "n/a")


def _manipulation_row(m: str, r: ManipulationResult) -> str:
    """One manipulation's row of the summary's table."""
    med = r.mediation
    share = "n/a"
    if med.evaluable:
        share = fmt(med.share_via_cos.estimate if med.share_via_cos else None, ".2f")
        if not excludes_zero(r.slope_auroc):
            share = "n/a (no total slope)"  # a share of a slope indistinguishable from 0
    mixed = r.mixed
    covariate = (found := family(m)) is not None and found.log_level_covariate
    term = "x_within" if covariate else "auroc"
    mixed_text = (
        est(mixed.term(term)) + ("" if mixed.converged else " (not converged)")
        if mixed.evaluable and term in mixed.terms
        else "n/a"
    )
    aurocs = [row.auroc.estimate for row in r.curve if row.auroc and row.auroc.estimate is not None]
    tested = f"levels {min(aurocs):.2f}–{max(aurocs):.2f}" if aurocs else "n/a"
    cells = next((x.tested for x in r.minimum_effective if x.tested), None)
    if cells:  # the minimum effective levels are read on the cells' range, not the levels'
        tested = f"cells {cells[0]:.2f}–{cells[1]:.2f}; {tested}"
    return (
        f"| {m} | {tested} | {est(r.slope_auroc)} | {est(r.partial.auroc)} | "
        f"{est(r.partial.cos_ref)} | {share} | {mixed_text} | "
        f"{_level_at(r, 0.5)} | {_level_at(r, 1.0)} |"
    )


def summary_markdown(record: IdentifyRecord) -> str:
    """The run's summary: the findings, one row per manipulation, the predictors, the
    between-concept correlation, a re-analysed Phase 6 run and the stage times."""
    lines = findings(record)
    lines += [
        "",
        f"# Phase 6 identification {record.run_id} ({record.label})",
        "",
        f"Outcome: {record.outcome}; layer {record.layer}, "
        f"α {fmt(record.alpha, '.0f')}, β per concept from v*'s held-out "
        "selection. Intervals: 95%, concepts resampled.",
        f"Prompting baseline (likelihood, mean over concepts): {fmt(record.baseline.mean)}.",
        "",
        "| manipulation | AUROC tested | slope on AUROC | AUROC slope beside cos | cos slope "
        "| share via cos | MixedLM | min AUROC 50% | min AUROC 100% |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_manipulation_row(m, r) for m, r in record.manipulations.items()]
    lines += ["", "## Predictors (pooled, within concepts)", ""]
    lines += [
        "| predictor | r | reliability | effect reliability | disattenuated r |",
        "|---|---|---|---|---|",
    ]
    for p, d in record.pooled.predictors.items():
        lines.append(
            f"| {p} | {est(d.observed)} | {est(d.reliability_x, '.2f')} | "
            f"{est(d.reliability_y, '.2f')} | {est(d.corrected)} |"
        )
    between, fz = record.between_concepts, record.between_concepts.fisher_z
    if between.evaluable:
        lines += [
            "",
            f"Across concepts at v*: r(AUROC, effect) {est(between.observed)}, disattenuated "
            f"{est(between.corrected)}"
            + (
                f"; Fisher-z interval over {fz.n_clusters} concepts "
                f"[{fmt(fz.low, '+.2f')}, {fmt(fz.high, '+.2f')}]."
                if fz is not None
                else "."
            ),
        ]
    phase6 = record.phase6
    if phase6 is not None:
        lines += ["", f"## Phase 6 run {phase6.run} re-analysed", ""]
        lines += [
            "| source | predictor | sign | x_within | x_between | log n "
            "| within slope beside log n |",
            "|---|---|---|---|---|---|---|",
        ]
        for f in phase6.fits:
            terms = " | ".join(est(f.mixed.term(t)) for t in ("x_within", "x_between", "log_n"))
            lines.append(
                f"| {f.source} | {f.predictor} | {f.sign} | {terms} | "
                f"{est(f.within_slope_given_log_n)} |"
            )
    timings = record.timings
    lines += ["", "Wall time (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items())]
    return "\n".join(lines) + "\n"
