"""Phase 5's measurement block (``RunRecord.statistics.measurement``), typed: how reliable
each measure is, the correlations corrected for it, the likelihood outcome per null
family and Δ's scale (``phase5/measurement.py`` builds it). Version 4 of the record kept
it as loose dicts; :func:`_version_4` reads those."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from experiments.record.base import _Block
from metrics.intervals import Interval
from metrics.reliability import Disattenuated, Reliability


class LikelihoodFamily(_Block):
    """One null family at one sign: the likelihood outcome's mean over concepts and, for
    a null family, the concept arm above it (paired by concept)."""

    family: str = Field(description="concept, random, null:neutral or null:other")
    sign: str
    mean: Interval = Field(description="mean e over concepts, nats per token")
    n_concepts: int
    above: Interval | None = Field(None, description="the concept arm's e minus this family's")
    beats: int | None = Field(None, description="concepts whose own e exceeds this family's")


class DirectionFit(_Block):
    """The likelihood outcome against the generation effect (ungated e) across one
    sign's directions (each concept's own and its random ones)."""

    r: Interval = Field(description="Pearson r over directions (n), concepts resampled")
    p_value: float | None = None


class ReferenceGapSummary(_Block):
    """Δ's scale: Δ(on-concept texts) − Δ(off-concept texts), and the effect above the
    null as a fraction of it per sign."""

    gap: Interval
    reliability: Reliability
    fraction_pos: Interval
    fraction_neg: Interval


class Measurement(_Block):
    """Reliabilities, corrected correlations, the likelihood outcome and Δ's scale."""

    reliability: dict[str, Reliability] = Field(description="split-half, per measure")
    corrected_correlations: dict[str, Disattenuated] = Field(
        default_factory=dict, description="observed and disattenuated, per pair of measures"
    )
    likelihood: list[LikelihoodFamily] = Field(default_factory=list)
    likelihood_vs_effect_by_direction: dict[str, DirectionFit] = Field(default_factory=dict)
    reference_gap: ReferenceGapSummary | None = None
    unpaired: dict[str, str] = Field(
        default_factory=dict,
        description="concepts with no other concept's texts to pair with, and why",
    )

    @model_validator(mode="before")
    @classmethod
    def _of_version_4(cls, data: Any) -> Any:
        return _version_4(data) if isinstance(data, dict) else data


def _ends(row: dict[str, object], prefix: str, estimate: str) -> dict[str, object]:
    return {"estimate": row.get(estimate), "low": row.get(f"{prefix}low"),
            "high": row.get(f"{prefix}high")}  # fmt: skip


def _reliability(row: dict[str, object]) -> dict[str, object]:
    """Version 4 wrote a predictor without test scores as ``{estimate, reason}`` alone."""
    empty = {"half_r": None, "split_sd": None, "n_concepts": 0, "n_splits": 0, "method": ""}
    return empty | row


def _direction(row: dict[str, object]) -> dict[str, object]:
    """A version-4 ``Correlation.to_dict()`` with ``n_directions`` (or not evaluable)."""
    if not row.get("evaluable"):
        return {"r": {"reason": row.get("reason") or "", "n": row.get("n") or 0}}
    r = _ends(row, "ci_", "r") | {"n": row["n_directions"], "method": row["ci_method"]}
    return {"r": r | {"n_clusters": row.get("n_clusters") or 0}, "p_value": row["p_value"]}


def _family(row: dict[str, object]) -> dict[str, object]:
    """A version-4 likelihood row (``mean``, ``low``, ``high``, ``above_low``, ...)."""
    out = {k: row[k] for k in ("family", "sign", "n_concepts")} | {"mean": _ends(row, "", "mean")}
    if "above" in row:
        out |= {"above": _ends(row, "above_", "above"), "beats": row.get("beats")}
    return out


def _version_4(data: dict[str, Any]) -> dict[str, Any]:
    """Version 4's loose dicts (``mean``/``low``/``high``, a correlation's ``ci_low``) as
    version 5's blocks; each part of a version-5 block passes unchanged."""
    out = dict(data)
    out["reliability"] = {
        k: _reliability(v) if isinstance(v, dict) else v
        for k, v in data.get("reliability", {}).items()
    }
    out["likelihood"] = [
        _family(r) if isinstance(r, dict) and "low" in r else r
        for r in data.get("likelihood") or []
    ]
    by = data.get("likelihood_vs_effect_by_direction") or {}
    if by.get("evaluable") is False:  # version 4: no per-arm generation effects at all
        by = {sign: by for sign in ("pos", "neg")}
    out["likelihood_vs_effect_by_direction"] = {
        s: _direction(v) if isinstance(v, dict) and "evaluable" in v else v for s, v in by.items()
    }
    gap = data.get("reference_gap")
    if isinstance(gap, dict) and "mean" in gap:
        out["reference_gap"] = {
            "gap": _ends(gap, "", "mean"),
            "reliability": _reliability(gap["reliability"]),
            "fraction_pos": gap["fraction_pos"],
            "fraction_neg": gap["fraction_neg"],
        }
    return out
