"""The signed effect, the null, the coherence gate, held-out β and criteria v2.

Pure tests on constructed records, property tests for the signed effect, and one run on
the tiny random Gemma where every arm is a random direction, so the effect above null
must be centred on zero.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.config import load_config
from experiments.kernel.effect import (
    above_null,
    evaluate_effect,
    mean_ci,
    paired_effects,
    select_betas,
    specificity,
    specificity_margin,
)
from metrics.text import alphabetic_share

PROPS = settings(derandomize=True, deadline=None, max_examples=50)
CONFIG = load_config(None, ["criteria.n_boot=300"])


def row(concept, prompt, strength, delta, arm="concept", sample=0, **extra):
    key = f"{concept}|p{prompt}|n{sample}|s{strength:+.3f}" + (
        f"|{arm}" if strength and arm != "concept" else ""
    )
    return {
        "key": key,
        "concept": concept,
        "prompt_index": prompt,
        "sample": sample,
        "strength": float(strength),
        "arm": arm,
        "split": "report",
        "beta": 0.2,
        "delta": float(delta),
        "perplexity": 10.0,
        "near_empty": False,
        "is_echo": False,
        **extra,
    }


@PROPS
@given(
    st.floats(-1, 1, allow_nan=False),
    st.floats(-1, 1, allow_nan=False),
    st.sampled_from([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]),
)
def test_signed_effect_points_the_way_the_strength_does(d0, ds, s):
    records = pd.DataFrame([row("a", 0, 0.0, d0), row("a", 0, s, ds)])
    e = paired_effects(records, CONFIG)
    assert len(e) == 1
    assert e["e"].iloc[0] == pytest.approx(np.sign(s) * (ds - d0))
    # Flipping the strength's sign flips the effect of the same shift.
    flipped = paired_effects(pd.DataFrame([row("a", 0, 0.0, d0), row("a", 0, -s, ds)]), CONFIG)
    assert flipped["e"].iloc[0] == pytest.approx(-e["e"].iloc[0])


def test_pairs_only_with_the_twin_of_the_same_unit():
    records = pd.DataFrame(
        [
            row("a", 0, 0.0, 0.0),
            row("a", 1, 0.0, 0.5),
            row("a", 0, 1.0, 0.1),
            row("a", 1, 1.0, 0.7),
        ]
    )
    e = paired_effects(records, CONFIG).set_index("prompt_index")["e"]
    assert e[0] == pytest.approx(0.1) and e[1] == pytest.approx(0.2)


def test_the_gate_counts_broken_text_as_no_effect():
    records = pd.DataFrame(
        [
            row("a", 0, 0.0, 0.0),
            row("a", 0, 1.0, 0.4, near_empty=True),
            row("a", 1, 0.0, 0.0),
            row("a", 1, 1.0, 0.4, perplexity=1000.0),
            row("a", 2, 0.0, 0.0),
            row("a", 2, 1.0, 0.4),
        ]
    )
    e = paired_effects(records, CONFIG).set_index("prompt_index")
    assert list(e["gate_pass"]) == [False, False, True]
    assert list(e["e_gated"]) == pytest.approx([0.0, 0.0, 0.4])
    assert list(e["e"]) == pytest.approx([0.4, 0.4, 0.4])
    assert e.loc[2, "combined"] > 0 and e.loc[0, "combined"] == 0
    # The samples table says why (the limit: the gate's multiple of the s = 0 median, 10).
    limit = CONFIG.gate.perplexity_multiple * 10.0
    assert list(e["gate_reason"]) == ["near-empty", f"perplexity 1000.0 > {limit:.1f}", ""]


ENGLISH = (
    "Birds are a group of warm-blooded vertebrates constituting the class Aves, "
    "characterised by feathers, toothless beaked jaws, the laying of hard-shelled eggs, "
    "a high metabolic rate, a four-chambered heart, and a strong yet lightweight skeleton."
)


def test_the_gate_fails_repetition_collapse_whatever_its_perplexity():
    """A loop the model finds likely (a Thai syllable at perplexity 5, "hehehe…jobjob…" at
    102, under the perplexity limit of 200) fails on repetition; prose passes; Δ and e
    are the same with the rule off."""
    texts = {0: "มุม" * 60, 1: "hehe" * 15 + "…" + "job" * 20, 2: ENGLISH}
    perplexities = {0: 5.0, 1: 102.0, 2: 12.0}
    records = pd.DataFrame(
        [
            r
            for p in range(3)
            for r in (
                row("a", p, 0.0, 0.0, text=ENGLISH[p * 40 :]),
                row("a", p, 1.0, 0.4, text=texts[p], perplexity=perplexities[p]),
            )
        ]
    )
    e = paired_effects(records, CONFIG).set_index("prompt_index")
    assert list(e["gate_pass"]) == [False, False, True]
    assert e.loc[0, "gate_reason"] == "repetition 60.0 > 2.0"
    assert e.loc[1, "gate_reason"].startswith("repetition ")
    assert list(e["e_gated"]) == pytest.approx([0.0, 0.0, 0.4])
    off = paired_effects(records, load_config(None, ["gate.repetition_multiple=null"]))
    assert list(off["gate_pass"]) == [True, True, True]
    assert list(off["e"]) == list(e["e"]) and list(off["delta"]) == list(e["delta"])


def test_the_repetition_limit_is_a_multiple_of_the_unsteered_texts_own():
    """Unsteered texts that loop themselves raise the bar: the limit is the multiple of
    their 0.9 quantile, so a steered loop no worse than the model's habit passes."""
    loop = "I love dogs. " * 6  # repetition 6
    records = pd.DataFrame(
        [
            row("a", 0, 0.0, 0.0, text=loop),
            row("a", 1, 0.0, 0.0, text=loop),
            row("a", 0, 1.0, 0.4, text="I love dogs. " * 10),  # 10 < 2 × 6
            row("a", 1, 1.0, 0.4, text="I love dogs. " * 13),  # 13 > 12
        ]
    )
    e = paired_effects(records, CONFIG).set_index("prompt_index")
    assert list(e["gate_pass"]) == [True, False]
    assert e.loc[1, "gate_reason"] == "repetition 13.0 > 12.0"


PROSE = [
    "The heron waited in the reeds, still as a post, until the fish came close.",
    "Maple trees turn red in autumn because the green pigment breaks down first.",
    "She opened the old map and traced the river with one finger, slowly.",
    "Bread rises when yeast turns sugar into gas; the dough holds the bubbles.",
    "In 1990, 5 of the 12 wells ran dry, and the village moved to the hills.",
]


def test_the_gate_fails_non_language_whatever_its_perplexity():
    """Texts the default run's null passed before the rule (digits and codes, bare tags
    and whitespace; perplexity and repetition within their limits) fail as
    non-language against the unsteered texts' own share; prose passes in any script; Δ
    and e are the same with the rule off."""
    steered = {
        0: "Nutt36 Nutt656665 CFA656 Nutt9 Nutt36 Nutt38 Nutt5 CFA53 Nutt50 Nutt66 Nutt",
        1: "'\n\n    \n    <b>    \n  \r\n    \r \r <b>  \n  </b>  \r  \n",
        2: "Птицы летают над морем, и ветер несёт их далеко на юг.",
        3: PROSE[0],
    }
    records = pd.DataFrame(
        [
            r
            for p in range(4)
            for r in (
                row("a", p, 0.0, 0.0, text=PROSE[p + 1]),
                row("a", p, 1.0, 0.4, text=steered[p], perplexity=20.0),
            )
        ]
    )
    e = paired_effects(records, CONFIG).set_index("prompt_index")
    # The limit: 0.75 x the 0.1 quantile of the unsteered shares (13/16, 1, 1, 1).
    unsteered = sorted(alphabetic_share(t) for t in PROSE[1:])
    assert unsteered[0] == pytest.approx(13 / 16)  # the text with numbers
    limit = 0.75 * float(np.quantile(unsteered, 0.1))
    assert list(e["gate_pass"]) == [False, False, True, True]
    assert e.loc[0, "gate_reason"] == f"non-language: alphabetic words 0.091 < {limit:.3f}"
    assert e.loc[1, "gate_reason"] == f"non-language: alphabetic words 0.0 < {limit:.3f}"
    assert list(e["e_gated"]) == pytest.approx([0.0, 0.0, 0.4, 0.4])
    off = paired_effects(records, load_config(None, ["gate.alphabetic_multiple=null"]))
    assert list(off["gate_pass"]) == [True, True, True, True]
    assert list(off["e"]) == list(e["e"]) and list(off["delta"]) == list(e["delta"])


def test_the_alphabetic_limit_is_a_fraction_of_the_unsteered_texts_own():
    """A model that writes numbers anyway lowers the bar: the same steered text passes
    beside unsteered texts as number-heavy as itself and fails beside prose."""
    numbers = "Item 4: 20 apples, 30 pears, 7 plums and 2 figs."  # 6 words of 11 tokens
    steered = "Order 12: 40 apples, 9 pears and 3 more."  # 5 words of 9 tokens
    for unsteered, passes in ((numbers, True), (PROSE[0], False)):
        records = pd.DataFrame(
            [row("a", 0, 0.0, 0.0, text=unsteered), row("a", 0, 1.0, 0.4, text=steered)]
        )
        e = paired_effects(records, CONFIG)
        assert bool(e["gate_pass"].iloc[0]) is passes, unsteered
        assert e["alphabetic_share"].iloc[0] == pytest.approx(5 / 9)


def test_effect_above_null_is_a_paired_difference():
    rows = []
    for p in range(4):
        rows += [
            row("a", p, 0.0, 0.0),
            row("a", p, 1.0, 0.3),
            row("a", p, 1.0, 0.1, arm="random:0"),
            row("a", p, 1.0, -0.1, arm="random:1"),
        ]
    effects = paired_effects(pd.DataFrame(rows), CONFIG)
    null = above_null(effects)
    assert list(null["above_null"]) == pytest.approx([0.3] * 4)


def test_held_out_selection_takes_the_best_beta_and_breaks_ties_low():
    rows = []
    for concept, best in (("a", 0.3), ("b", None)):
        for p in range(2):
            rows.append({**row(concept, p, 0.0, 0.0), "split": "selection"})
            for beta in (0.1, 0.2, 0.3):
                effect = 0.2 if beta == best else 0.05
                for s in (-1.0, 1.0):
                    r = row(concept, p, s, s * effect)
                    r.update(split="selection", beta=beta, key=r["key"] + f"|b{beta:g}")
                    rows.append(r)
    chosen = select_betas(pd.DataFrame(rows), CONFIG)
    assert chosen["a"]["beta"] == 0.3
    assert chosen["b"]["beta"] == 0.1  # all equal: the smallest β
    assert chosen["a"]["effects"][0.3] == pytest.approx(0.2)


def test_specificity_matrix_and_margin():
    rows = []
    for concept in ("a", "b"):
        for p in range(2):
            base = {"a": 0.0, "b": 0.0}
            steered = {"a": 0.3 if concept == "a" else 0.05, "b": 0.3 if concept == "b" else 0.05}
            rows.append(row(concept, p, 0.0, 0.0, delta_by_concept=base))
            rows.append(row(concept, p, 1.0, 0.3, delta_by_concept=steered))
    records = pd.DataFrame(rows)
    matrix = specificity(paired_effects(records, CONFIG), records)[1]
    assert matrix.loc["a", "a"] == pytest.approx(0.3) and matrix.loc["a", "b"] == pytest.approx(
        0.05
    )
    assert specificity_margin(matrix) == pytest.approx(0.25)


def test_criteria_v2_pass_fail_and_inconclusive_follow_the_intervals():
    rng = np.random.default_rng(0)
    rows = []
    for c in range(8):
        for p in range(4):
            strong = 0.4 + 0.01 * rng.normal()
            rows += [
                row(f"c{c}", p, 0.0, 0.0),
                row(f"c{c}", p, 1.0, strong),
                row(f"c{c}", p, -1.0, -strong),
                row(f"c{c}", p, 1.0, 0.01 * rng.normal(), arm="random:0"),
                row(f"c{c}", p, -1.0, 0.01 * rng.normal(), arm="random:0"),
            ]
    report = evaluate_effect(pd.DataFrame(rows), {f"c{c}": c / 8 for c in range(8)}, CONFIG)
    assert report.criteria["v2_effect_above_null_pos"].status == "pass"
    assert report.criteria["v2_direction_neg"].status == "pass"
    low = report.intervals["v2_effect_above_null_pos"].low
    assert low is not None and low > 0.15
    # The effect does not depend on the predictor here: no pass for the correlation.
    assert report.criteria["v2_predictor_vs_effect_pos"].status in ("fail", "inconclusive")


@pytest.fixture(scope="module")
def null_run(tmp_path_factory, mlflow_store, tiny_lm, embedder, single_threaded):
    """The tiny model with three random arms per concept and 4 prompts × 2 samples."""
    from experiments.phase5.run import run_phase5

    tmp = tmp_path_factory.mktemp("null")
    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=3",
            "generation.max_new_tokens=10",
            "generation.samples_per_prompt=2",
            "generation.prompts=['Tell me about {concept}.', 'Here is a story:', "
            "'Tell me about something.', 'Once upon a time']",
            "layer=2",
            "controls.random_directions=3",
            "controls.prompt_baseline=true",
            "criteria.n_boot=500",
            f"classifier.dir={tmp / 'cls'}",
            f"tracking.results_dir={tmp / 'res'}",
        ],
    )
    with single_threaded():
        return config, run_phase5(config, lm=tiny_lm, embedder=embedder)


def test_a_random_direction_above_the_null_is_centred_on_zero(null_run):
    config, result = null_run
    from experiments.rundir import RunDir

    run_dir = RunDir(config.tracking.results_dir, result.run_id)
    records = pd.DataFrame(run_dir.read_scored())
    effects = paired_effects(records, config)
    # Treat random:0 as if it were the concept and random:1-2 as its null.
    as_concept = effects[effects["arm"] != "concept"].copy()
    as_concept.loc[as_concept["arm"] == "random:0", "arm"] = "concept"
    diff = above_null(as_concept[as_concept["arm"] != "prompt"], "e")
    for sign in (1, -1):
        ci = mean_ci(diff[diff["sign"] == sign], "above_null", config)
        assert ci.low < 0 < ci.high, (sign, ci)


def test_the_run_reports_every_arm_and_the_prompt_baseline(null_run):
    _, result = null_run
    effect = result.effect
    assert {"concept/pos", "concept/neg", "random/pos", "random/neg", "prompt/pos"} <= set(
        effect.summary
    )
    assert effect.summary["random/pos"].n == 3 * 4 * 2 * 3
    assert result.record.criteria["v2_direction_pos"].status in (
        "pass",
        "fail",
        "inconclusive",
    )
    assert set(effect.specificity) == {1, -1}
    assert effect.specificity[1].shape == (3, 3)
    # The seed's criteria still see only the concept arm: 3 concepts × 8 units × 3 strengths.
    assert len(result.records) == 3 * 8 * 3


def test_held_out_selection_chooses_beta_on_selection_prompts_only(
    tmp_path, mlflow_store, tiny_lm, embedder, one_thread
):
    import json

    from experiments.phase5.run import run_phase5
    from experiments.rundir import RunDir

    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=2",
            "generation.max_new_tokens=6",
            "generation.prompts=['Tell me about {concept}.', 'Here is a story:', "
            "'Tell me about something.', 'Once upon a time']",
            "layer=2",
            "selection.mode=heldout",
            "selection.beta_grid=[0.1, 0.3]",
            "controls.random_directions=1",
            "criteria.n_boot=200",
            f"classifier.dir={tmp_path / 'cls'}",
            f"tracking.results_dir={tmp_path / 'res'}",
        ],
    )
    result = run_phase5(config, lm=tiny_lm, embedder=embedder)
    run_dir = RunDir(config.tracking.results_dir, result.run_id)
    chosen = json.loads(run_dir.file("selection.json").read_text())["concepts"]
    assert set(chosen) == {c for c in result.records["concept"]}
    generations = run_dir.read_generations()
    selection = [g for g in generations if g["split"] == "selection"]
    report = [g for g in generations if g["split"] == "report"]
    # Selection: 2 concepts × 2 prompts × (1 unsteered + 2 β × 2 signs).
    assert len(selection) == 2 * 2 * 5
    assert {g["prompt_index"] for g in selection} == {0, 1}
    assert {g["prompt_index"] for g in report} == {2, 3}
    for g in report:
        if g["strength"] != 0:
            assert g["beta"] == chosen[g["concept"]]["beta"]
    # Only the report prompts enter the criteria.
    assert set(result.records["prompt_index"]) == {2, 3}
    assert result.record.per_concept[report[0]["concept"]]["beta"] in (0.1, 0.3)


def test_rescore_may_change_the_gate_but_not_what_was_generated(null_run, embedder):
    from experiments.config import ConfigError
    from experiments.phase5.run import rescore

    _, result = null_run
    with pytest.raises(ConfigError, match="changes what was generated"):
        rescore(result.run_id, embedder=embedder, overrides=["generation.max_new_tokens=5"])
    strict = rescore(result.run_id, embedder=embedder, overrides=["gate.perplexity_multiple=1.01"])
    loose = rescore(result.run_id, embedder=embedder, overrides=["gate.perplexity_multiple=1000"])
    assert strict.record.config.gate.perplexity_multiple == 1.01
    strict_pass = strict.effect.summary["concept/pos"].gate_pass_fraction
    loose_pass = loose.effect.summary["concept/pos"].gate_pass_fraction
    assert strict_pass is not None and loose_pass is not None and strict_pass <= loose_pass
    # The texts themselves never change.
    assert list(strict.records.sort_values("key")["text"]) == list(
        loose.records.sort_values("key")["text"]
    )
