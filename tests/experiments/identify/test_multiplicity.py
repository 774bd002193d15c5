"""Co-primaries read by Holm's step-down (identify/estimation/multiplicity.py) and declared in a
pre-registration's primary block (prereg.primaries)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from experiments.identify.estimation.multiplicity import holm
from experiments.identify.estimation.primary import read_verdict
from experiments.identify.heldout.prereg import PreregistrationError, parse_primary, primaries
from experiments.record import PrimaryResult, PrimarySpec
from metrics.cluster import ClusterFit


def named(name: str) -> PrimarySpec:
    return PrimarySpec(name=name, predictor="auroc", outcome="likelihood")


def normal_score(estimates: dict[str, float], se: float = 1.0, margin: float | None = None):
    """A primary whose estimate is known, read on a normal interval at any confidence."""

    def score(spec, confidence):
        z = norm.ppf(1 - (1 - confidence) / 2)
        b = estimates[spec.name]
        fit = ClusterFit(b, b - z * se, b + z * se)
        return PrimaryResult(spec=spec, slope=fit, verdict=read_verdict(fit, "positive", margin))

    return score


def test_one_primary_is_read_at_the_usual_level():
    (r,) = holm([named("P1")], normal_score({"P1": 2.5}))
    assert r.confidence == pytest.approx(0.95) and r.verdict == "supported" and r.step == 1


def test_the_second_primary_is_read_at_alpha_once_the_first_settles():
    """P1 passes at α/2; P2 (z = 2.1) fails at α/2 (needs 2.24) but passes at α (1.96)."""
    p1, p2 = holm([named("P1"), named("P2")], normal_score({"P1": 4.0, "P2": 2.1}))
    assert (p1.verdict, p1.step, p1.confidence) == ("supported", 1, pytest.approx(0.975))
    assert (p2.verdict, p2.step, p2.confidence) == ("supported", 2, pytest.approx(0.95))


def test_nothing_settles_when_neither_passes_at_half_alpha():
    p1, p2 = holm([named("P1"), named("P2")], normal_score({"P1": 2.1, "P2": 2.1}))
    assert p1.verdict == p2.verdict == "inconclusive" and p1.step == p2.step == 0
    assert p1.confidence == p2.confidence == pytest.approx(0.975)


def test_an_equivalence_reading_settles_like_a_rejection():
    p1, p2 = holm(
        [named("P1"), named("P2")],
        normal_score({"P1": 0.0, "P2": 2.1}, se=0.05, margin=0.25),
    )
    assert p1.verdict == "no_practical_effect" and p1.step == 1
    assert p2.verdict == "supported"


@settings(max_examples=40, deadline=None)
@given(a=st.floats(-5, 5), b=st.floats(-5, 5))
def test_holm_settles_everything_bonferroni_does_and_reads_no_wider(a: float, b: float):
    """Holm is uniformly more powerful than Bonferroni: whatever Bonferroni (both at
    α/2) settles, Holm settles with the same verdict."""
    specs = [named("P1"), named("P2")]
    score = normal_score({"P1": a, "P2": b})
    readings = holm(specs, score)
    for spec, r in zip(specs, readings, strict=True):
        bonferroni = score(spec, 0.975).verdict
        if bonferroni != "inconclusive":
            assert r.verdict == bonferroni
        assert r.confidence <= 0.975 + 1e-12


def test_the_family_wise_error_stays_at_alpha_when_both_nulls_hold():
    """Two correlated null estimates (ρ = 0.5), 4,000 seeded draws: how often any claim of
    a sign is made is at most α (about 0.05), not the 0.09 of reading each at 95%."""
    rng = np.random.default_rng(0)
    z = rng.multivariate_normal([0, 0], [[1, 0.5], [0.5, 1]], size=4000)
    specs = [named("P1"), named("P2")]
    any_holm = any_naive = 0
    for a, b in z:
        score = normal_score({"P1": float(a), "P2": float(b)})
        any_holm += any(r.verdict != "inconclusive" for r in holm(specs, score))
        any_naive += any(score(s, 0.95).verdict != "inconclusive" for s in specs)
    assert any_holm / 4000 < 0.06 < any_naive / 4000


PRIMARY = """```yaml
primary:
  name: P1
  estimand: practitioner_equal_norm
  predictor: auroc
  outcome: likelihood
  strength: 1.0
  control: none
  estimator: practitioner
  hypothesis: positive
  sesoi: 0.25
  equivalence_margin: 0.25
  rule: read by Holm
{extra}
```"""


def test_a_co_primary_takes_the_primarys_keys_and_replaces_its_own():
    text = PRIMARY.format(
        extra="  multiplicity: holm\n  alpha: 0.05\n  co_primaries:\n"
        "    - {name: P2, estimand: practitioner_full_data, estimator: practitioner_full_data}"
    )
    p1, p2 = primaries(parse_primary(text))
    assert p1.name == "P1" and p1.estimator == "practitioner"
    assert p2.name == "P2" and p2.estimator == "practitioner_full_data"
    assert p2.predictor == "auroc" and p2.equivalence_margin == 0.25
    assert "co_primaries" not in p2.model_fields_set


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ("  co_primaries:\n    - {name: P2}", "multiplicity"),
        ("  multiplicity: holm\n  co_primaries:\n    - {estimator: practitioner}", "name"),
        ("  multiplicity: holm\n  co_primaries:\n    - {name: P2, predictor: kl}", "may set"),
        ("  multiplicity: holm\n  co_primaries:\n    - {name: P1}", "distinct"),
        (
            "  multiplicity: holm\n  co_primaries:\n    - {name: P2, estimator: magic}",
            "not one of",
        ),
    ],
)
def test_a_malformed_co_primary_is_refused_by_name(extra: str, said: str):
    with pytest.raises(PreregistrationError, match=said):
        parse_primary(PRIMARY.format(extra=extra))
