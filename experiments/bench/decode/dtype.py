"""Section ``dtype``: the batched timing in the other precision, and whether Δ moves.

The other dtype (bf16 when the model is fp32) runs the same rows and seeds, interleaved
with the batched run; the mean Δ per strength under each is compared, paired by row, to
judge whether bf16 on CPU changes the science or only the sampled text.
"""

from __future__ import annotations

import copy
import math
import statistics
from collections.abc import Sequence
from typing import Any

import torch

from experiments.bench.core.measure import Measurement, rounded, speedup
from experiments.bench.core.workload import Workload, delta_by_strength, neutral_texts
from steering.models import LoadedModel


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def other_precision(lm: LoadedModel, spec: str | None) -> tuple[LoadedModel, str]:
    """The model in the other dtype: bf16 when ``lm`` is fp32, else fp32 (reloaded)."""
    from steering.models import load_model, wrap_model

    if lm.dtype == torch.float32:
        # transformers types its @wraps(nn.Module.to) override as unbound (self expected first)
        model = copy.deepcopy(lm.model).to(torch.bfloat16)  # type: ignore[arg-type]
        info = {**lm.info, "cast_from": "float32"}
        return wrap_model(model, lm.tokenizer, lm.model_id, info), "bfloat16"
    if spec is not None:
        return load_model(spec, device=str(lm.device), dtype="float32"), "float32"
    model = copy.deepcopy(lm.model).float()
    return wrap_model(model, lm.tokenizer, lm.model_id, dict(lm.info)), "float32"


def _se(values: Sequence[float]) -> float | None:
    """Standard error of the mean (None below two values)."""
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None


def _within_2se(diff: Sequence[float], se: float | None) -> bool | None:
    return None if se is None else bool(abs(statistics.fmean(diff)) <= 2 * se + 1e-12)


def _zero_key(key: str) -> str:
    """The strength-0 row of a row key ``synset|p0|n0|s+1.000``."""
    head, _, _ = key.rpartition("|s")
    return f"{head}|s{0.0:+.3f}"


def compare_deltas(
    base: dict[str, dict[str, Any]], other: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Per strength: mean Δ under each dtype and their paired difference with its SE."""
    out: dict[str, dict[str, Any]] = {}
    strengths = sorted({v["strength"] for v in base.values()})
    zero = {k: v["delta"] for k, v in base.items() if v["strength"] == 0.0}
    zero_other = {k: v["delta"] for k, v in other.items() if v["strength"] == 0.0}
    for s in strengths:
        keys = sorted(k for k, v in base.items() if v["strength"] == s and k in other)
        a = [base[k]["delta"] for k in keys]
        b = [other[k]["delta"] for k in keys]
        diff = [y - x for x, y in zip(a, b, strict=True)]
        se = _se(diff)
        entry = {
            "n": len(keys),
            "mean_delta_base": rounded(statistics.fmean(a)) if a else None,
            "mean_delta_other": rounded(statistics.fmean(b)) if b else None,
            "se_mean_delta_base": rounded(_se(a)),
            "mean_difference": rounded(statistics.fmean(diff)) if diff else None,
            "se_difference": rounded(se),
            "within_2se": _within_2se(diff, se),
        }
        if s != 0.0:  # the steering effect Δ_s - Δ_0, paired by (concept, prompt, sample)
            eff_a, eff_b = [], []
            for k in keys:
                k0 = _zero_key(k)
                if k0 in zero and k0 in zero_other:
                    eff_a.append(base[k]["delta"] - zero[k0])
                    eff_b.append(other[k]["delta"] - zero_other[k0])
            if eff_a:
                shift_diff = [y - x for x, y in zip(eff_a, eff_b, strict=True)]
                se_shift = _se(shift_diff)
                entry["mean_shift_base"] = rounded(statistics.fmean(eff_a))
                entry["mean_shift_other"] = rounded(statistics.fmean(eff_b))
                entry["mean_shift_difference"] = rounded(statistics.fmean(shift_diff))
                entry["se_shift_difference"] = rounded(se_shift)
                entry["shift_within_2se"] = _within_2se(shift_diff, se_shift)
        out[f"{s:+g}"] = entry
    return out


def section_dtype(
    base_lm: LoadedModel,
    other: LoadedModel,
    wl: Workload,
    measured: dict[str, Measurement],
    embedder: Any,
) -> dict[str, Any]:
    base, alt = dtype_name(base_lm.dtype), dtype_name(other.dtype)
    m_base, m_alt = measured[base], measured[alt]
    result: dict[str, Any] = {
        "base": base,
        "other": alt,
        "how": "the same rows and seeds, timed interleaved with the batched run; the other "
        "dtype is a cast copy of the same weights",
        "generation": {base: m_base.to_dict(), alt: m_alt.to_dict()},
        "speedup_other_vs_base": speedup(m_alt, m_base),
    }
    if m_base.generations and m_alt.generations:
        same = sum(
            a.token_ids == b.token_ids
            for a, b in zip(m_base.generations, m_alt.generations, strict=True)
        )
        result["identical_generations"] = f"{same}/{len(m_base.generations)}"
    if wl.plan is not None and embedder is not None:
        from steering.activations import residual_scale

        d_base = delta_by_strength(wl.plan, m_base.generations or [])
        d_alt = delta_by_strength(wl.plan, m_alt.generations or [])
        per = compare_deltas(d_base, d_alt)
        result["delta_per_strength"] = per
        result["delta_same_within_2se"] = all(
            v["within_2se"] is not False and v.get("shift_within_2se") is not False
            for v in per.values()
        )
        result["alpha"] = {
            base: rounded(wl.plan.alpha, 2),
            alt: rounded(residual_scale(other, neutral_texts(wl.plan), wl.layer), 2),
        }
        result["note"] = (
            "vectors, α and centroids come from the fp32 plan; the difference is paired by "
            "row (same seed, same uniforms), SE over rows"
        )
    return result
