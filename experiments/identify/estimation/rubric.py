"""The AxBench rubric as an outcome of identify: how reliably a judge ranks directions.

``steer-eval panel --rubric axbench --run <identify run>`` has every generation of the
validating directions rated on AxBench's concept, instruction and fluency axes (0-2
each, combined by harmonic mean, ``hm``). This module reads those ratings as an outcome
of the direction, the way ``crosscheck.py`` reads the gated Δ:

* one unit per steered report text (s = +1): the panel's mean ``hm`` over the judges
  that rated it, less its unsteered twin's (same concept, prompt and sample), so a
  direction's value is its paired rubric effect;
* among good directions (cos(v, v*) ≥ ``analysis.GOOD_COS``), its within-concept
  split-half reliability (Spearman–Brown over halves of each direction's texts, the
  same seeded splits for every direction of a concept) beside the likelihood's on the
  same rows (halves of the likelihood's text pairs at s = +1, ``likelihood.jsonl``);
* its disattenuated within-concept agreement with the likelihood outcome and with the
  generated Δ (gated), each corrected by both measures' reliabilities.

A reliability near 0 says the judge cannot tell these directions apart, whatever the
agreement reads. Exploratory: the pre-registered primary's outcome is chosen by the rule
in ``docs/identify.md``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from experiments.identify.estimation import stats
from experiments.identify.estimation.analysis import GOOD_COS
from experiments.identify.estimation.cells import measure_halves
from experiments.identify.estimation.crosscheck import canonical, unit_halves
from experiments.identify.measures import RUBRIC as DECLARED
from experiments.record.identify import RubricValidity
from metrics.intervals import Interval

TWIN_KEYS = ("synset", "prompt_index", "sample", "split")
RUBRIC = DECLARED.column  # the rubric outcome of one text: its hm less its twin's
LIKELIHOOD = str(DECLARED.agrees_with)  # the likelihood outcome at s = +1 (directions.csv)
GENERATED = "e_gated"  # the generated Δ, gated (kernel.effect.paired_effects)


def rubric_units(samples: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """One row per steered report text of a direction (s > 0): concept, direction (the
    tables' id), prompt_index, sample, sample_id, ``hm`` (the mean over the judges that
    scored it; abstentions left out), ``hm_twin`` and ``hm_effect``.

    ``samples``: ``panel.panel_samples`` (with ``vectors``, the direction a text was
    steered along); ``scores``: ``PanelResult.scores`` (``sample_id``, ``judge``,
    ``score`` = hm)."""
    rated = samples.assign(hm=samples["sample_id"].map(scores.groupby("sample_id")["score"].mean()))
    twins = rated[rated["strength"] == 0.0].drop_duplicates(list(TWIN_KEYS))
    twins = twins[[*TWIN_KEYS, "hm"]].rename(columns={"hm": "hm_twin"})
    vectors = rated["vectors"].fillna("").astype(str)
    steered = rated[(rated["strength"] > 0) & (rated["split"] == "report") & (vectors != "")]
    steered = steered.merge(twins, on=list(TWIN_KEYS), how="inner")
    return pd.DataFrame(
        {
            "concept": steered["synset"].to_numpy(),
            "direction": steered["vectors"].map(canonical).to_numpy(),
            **{k: steered[k].to_numpy() for k in ("prompt_index", "sample", "sample_id")},
            "hm": steered["hm"].to_numpy(float),
            "hm_twin": steered["hm_twin"].to_numpy(float),
            RUBRIC: (steered["hm"] - steered["hm_twin"]).to_numpy(float),
        }
    )


def rubric_validity(
    units: pd.DataFrame,
    directions: pd.DataFrame,
    pairs: Mapping[tuple[str, str], np.ndarray],
    *,
    n_boot: int,
    seed: int,
) -> RubricValidity:
    """The rubric's reliability among good directions and its agreement with the
    likelihood (and with the generated Δ when ``units`` carries ``e_gated``).

    ``directions``: the run's ``directions.csv`` (``cos_ref``, the likelihood effect);
    ``pairs``: per (concept, direction) the likelihood effect of each text pair at s = +1
    (``tabulate.effects_by_direction``). Rows whose texts do not all carry a rating are
    left out (a judge that abstained on every text of a direction)."""
    cells = (
        units.dropna(subset=[RUBRIC])
        .groupby(["concept", "direction"], sort=True)
        .agg(**{RUBRIC: (RUBRIC, "mean"), "n_texts": (RUBRIC, "size")})
        .reset_index()
    )
    if GENERATED in units:
        gen = units.groupby(["concept", "direction"])[GENERATED].mean().rename(GENERATED)
        cells = cells.merge(gen.reset_index(), on=["concept", "direction"], how="left")
    table = directions.copy()
    if LIKELIHOOD not in table:  # a run measured at s = +1 only calls it "effect"
        table[LIKELIHOOD] = table["effect"]
    frame = cells.merge(
        table[["concept", "direction", "cos_ref", LIKELIHOOD]],
        on=["concept", "direction"],
        how="inner",
    )
    good = frame[frame["cos_ref"] >= GOOD_COS].reset_index(drop=True)
    n_concepts = int(good["concept"].nunique())
    found = RubricValidity(
        good_cos=GOOD_COS,
        n_texts=int(good["n_texts"].sum()) if len(good) else 0,
        n_directions=len(good),
        n_concepts=n_concepts,
        evaluable=n_concepts >= 2,
    )
    if n_concepts < 2:
        why = (f"{n_concepts} concepts with rated good directions (cos(v, v*) ≥ {GOOD_COS}); "
               "at least 2 are needed")  # fmt: skip
        return found.model_copy(update={"reason": why})
    rated = units.dropna(subset=[RUBRIC])
    rubric_halves = unit_halves(rated, good, RUBRIC, seed, name="rubric-halves")
    order = {str(c): list(g["direction"]) for c, g in good.groupby("concept", sort=True)}
    likelihood_halves = measure_halves(dict(pairs), order, seed, LIKELIHOOD)
    # each agreement carries both measures' reliabilities, from the same seeded draws
    found.agreement_likelihood = agree = stats.disattenuated_within(
        good, RUBRIC, LIKELIHOOD, rubric_halves, likelihood_halves, n_boot=n_boot, seed=seed
    )
    found.reliability_rubric = agree.reliability_x
    found.reliability_likelihood = agree.reliability_y
    if GENERATED in good and good[GENERATED].notna().any():
        gen_halves = unit_halves(units, good, GENERATED, seed)
        found.agreement_generated = against_gen = stats.disattenuated_within(
            good, RUBRIC, GENERATED, rubric_halves, gen_halves, n_boot=n_boot, seed=seed
        )
        found.reliability_generated = against_gen.reliability_y
    found.per_direction = [
        {
            "direction": str(d),
            "n_concepts": int(g["concept"].nunique()),
            **{k: float(g[k].mean()) for k in (RUBRIC, LIKELIHOOD, GENERATED) if k in g},
        }
        for d, g in good.groupby("direction", sort=True)
    ]
    return found


def validity_lines(result: RubricValidity) -> list[str]:
    """The result in a few lines (the CLI and the panel child run's note)."""

    def fmt(block: Interval | None) -> str:
        ends = block.ends() if block is not None else None
        if ends is None:
            return f"n/a ({(block.reason if block else '') or 'not evaluable'})"
        return f"{ends[0]:+.3f} [{ends[1]:+.3f}, {ends[2]:+.3f}]"

    if not result.evaluable:
        return [f"AxBench rubric on identify: not evaluable ({result.reason or ''})"]
    lines = [
        f"AxBench rubric among good directions (cos(v, v*) ≥ {result.good_cos}; "
        f"{result.n_directions} directions of {result.n_concepts} concepts, "
        f"{result.n_texts} texts), within-concept split-half reliability:",
        f"  rubric (hm, paired) {fmt(result.reliability_rubric)}; likelihood (s = +1) "
        f"{fmt(result.reliability_likelihood)}"
        + (
            f"; generated Δ (gated) {fmt(result.reliability_generated)}"
            if result.reliability_generated is not None
            else ""
        ),
    ]
    for block, name in ((result.agreement_likelihood, "likelihood"),
                        (result.agreement_generated, "Δ")):  # fmt: skip
        if block is not None:
            lines.append(
                f"  within-concept r with the {name}: {fmt(block.observed)}, "
                f"disattenuated {fmt(block.corrected)}"
            )
    return lines


def validity_metrics(result: RubricValidity) -> dict[str, float]:
    """MLflow metrics ``rubric/<name>`` (with ``_low`` and ``_high``): the reliabilities
    and the agreements, observed and disattenuated; none when not evaluable."""
    blocks = {
        "reliability_rubric": result.reliability_rubric,
        "reliability_likelihood": result.reliability_likelihood,
        "reliability_generated": result.reliability_generated,
    }
    for name, fit in (("agreement_likelihood", result.agreement_likelihood),
                      ("agreement_generated", result.agreement_generated)):  # fmt: skip
        if fit is not None:
            blocks[f"{name}_observed"] = fit.observed
            blocks[f"{name}_disattenuated"] = fit.corrected
    out: dict[str, float] = {}
    for name, block in blocks.items():
        if block is None or block.estimate is None:
            continue
        out[f"rubric/{name}"] = float(block.estimate)
        for side, value in (("low", block.low), ("high", block.high)):
            if value is not None:
                out[f"rubric/{name}_{side}"] = float(value)
    return out
