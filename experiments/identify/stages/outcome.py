"""The steering outcomes: the likelihood outcome for every direction, the prompting
baseline on the same texts, and the output-side predictors.

The likelihood outcome (``steering.likelihood``): for concept c, direction v and
strength s, e = s·(C_s − C_0) with C the mean per-token log-likelihood of c's
on-concept texts minus that of their paired off-concept texts, steering h + s·β_c·α·v
at every position (β_c: the reference direction's held-out strength, the same for every
direction of c). Texts come from the *whole* concept file
(``experiments/likelihood_texts.py``), so a concept's texts do not depend on which
split it falls in. Records are appended per concept to the run folder, so an
interrupted run resumes where it stopped.

The prompting baseline: the unsteered model with the instruction of the prompting arm
(``controls.prompt_positive`` / ``prompt_negative``) before the prefix, as the
generation study's prompt arm does: e = s·((L_p − L_0)(on) − (L_p − L_0)(off)).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from experiments.config import IdentifyStudyConfig
from experiments.likelihood_texts import LikelihoodTexts
from experiments.rundir import RunDir, append_jsonl, read_jsonl
from steering.likelihood import (
    UnsteeredLoglik,
    encode_texts,
    likelihood_outcomes,
    pair_effects,
    text_loglik,
)
from steering.models import LoadedModel
from steering.readout import (
    concept_token_ids,
    last_token_residuals,
    logit_lens_gain,
    next_token_kl,
)
from steering.vector import Direction

if TYPE_CHECKING:
    from experiments.identify.stages.data import DirectionSet


def stacked(directions: Sequence[Direction]) -> torch.Tensor:
    """The directions as one float32 ``[directions, hidden]`` tensor, in order."""
    return torch.stack([d.vector for d in directions]).to(torch.float32)


@dataclass(frozen=True)
class Steering:
    """What every steered stage of identify shares: the model, the study's config and
    run folder, the layer, α (the median residual norm there), each concept's β and its
    directions by id. One value in place of the same seven arguments to every stage."""

    lm: LoadedModel
    config: IdentifyStudyConfig
    run_dir: RunDir
    layer: int
    alpha: float
    betas: dict[str, float]
    directions: DirectionSet

    def only(self, concepts: Iterable[str]) -> Steering:
        """The same, with the directions of ``concepts`` alone."""
        return replace(self, directions=self.directions.only(concepts))


def score_likelihood(
    steering: Steering,
    texts: LikelihoodTexts,
    progress: Callable[[str], None] = lambda _m: None,
    file: str = RunDir.LIKELIHOOD,
) -> list[dict[str, Any]]:
    """Likelihood records for every (concept, direction, strength, pair) of the concepts
    in ``steering.directions``; concepts already in the run folder's ``file`` are not
    scored again."""
    lm, config, run_dir = steering.lm, steering.config, steering.run_dir
    layer, alpha, betas = steering.layer, steering.alpha, steering.betas
    ident, lk = config.identify, config.likelihood
    path = run_dir.file(file)
    records = read_jsonl(path)
    done = {r["concept"] for r in records}
    concepts = steering.directions.concepts
    for i, concept in enumerate(concepts):
        if concept in done:
            continue
        directions = steering.directions.of(concept)
        progress(
            f"likelihood outcome: concept {i + 1}/{len(concepts)} ({len(directions)} directions)"
        )
        rows = likelihood_outcomes(
            lm,
            layer,
            betas[concept] * alpha,
            {concept: texts.on[concept]},
            {concept: texts.off[concept]},
            directions,
            ident.strengths,
            config.steering.mode,
            lk.prefix,
            batch_size=lk.batch_size,
        )
        rows = [{**r, "direction": r.pop("arm"), "beta": betas[concept]} for r in rows]
        append_jsonl(path, rows)
        records += rows
    return records


def prompt_baseline(
    lm: LoadedModel,
    config: IdentifyStudyConfig,
    texts: LikelihoodTexts,
    concepts: Sequence[str],
    names: dict[str, str],
) -> list[dict[str, Any]]:
    """Per concept, strength and pair: the prompting baseline's likelihood effect."""
    ident, lk = config.identify, config.likelihood
    out = []
    for concept in concepts:
        on, off = texts.on[concept], texts.off[concept]
        both = [*on, *off]
        base = text_loglik(lm, encode_texts(lm, both, lk.prefix), batch_size=lk.batch_size)
        for s in ident.strengths:
            template = config.controls.prompt_positive if s > 0 else config.controls.prompt_negative
            prefix = template.replace("{concept}", names[concept]) + lk.prefix
            prompted = text_loglik(lm, encode_texts(lm, both, prefix), batch_size=lk.batch_size)
            n = len(on)
            units = pair_effects(prompted[:n], prompted[n:], base[:n], base[n:], s)
            out += [
                {"concept": concept, "strength": float(s), "pair": i, "e": float(u)}
                for i, u in enumerate(units)
            ]
    return out


def output_predictors(
    steering: Steering,
    lens_texts: Sequence[str],
    words: dict[str, list[str]],
    prompts: dict[str, list[str]],
) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """Per (concept, direction): the logit-lens gain per position and the next-token KL
    per prompt, at s = +1 and the concept's β (the units their reliabilities split)."""
    lm, config, layer, alpha = steering.lm, steering.config, steering.layer, steering.alpha
    residuals = last_token_residuals(lm, lens_texts, layer)
    out: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for concept in steering.directions.concepts:
        mine = steering.directions.of(concept)
        ids = [d.id for d in mine]
        dirs = stacked(mine)
        coefs = torch.full((len(ids),), float(steering.betas[concept] * alpha))
        tokens = concept_token_ids(lm, words[concept])
        lens = logit_lens_gain(lm, residuals, dirs, coefs, [tokens] * len(ids))
        kl = next_token_kl(lm, prompts[concept], layer, dirs, coefs, config.likelihood.batch_size)
        for j, d_id in enumerate(ids):
            out[(concept, d_id)] = {"lens": lens[j], "kl": kl[j]}
    return out


def score_dose(
    steering: Steering,
    texts: LikelihoodTexts,
    subset: Sequence[str],
    outputs: dict[tuple[str, str], dict[str, np.ndarray]],
    prompts: dict[str, list[str]],
    progress: Callable[[str], None] = lambda _m: None,
    words: dict[str, list[str]] | None = None,
) -> list[dict[str, Any]]:
    """The subset's likelihood outcome (s = +1) at ``identify.subset_doses`` × β and at
    each direction's KL-matched dose (``matched.py``), with the next-token KL each dose
    gives; concepts already in the run folder's file are not scored again.

    ``identify.dose_kl: concept_free`` matches on the KL without the concept's tokens
    (``words[concept]``'s, as the logit-lens gain reads them); ``identify.dose_verify``
    bisects on a seeded half of the concept's prompts and records the matched dose's KL on
    the other half (``kl_verify``) beside v*'s there (``kl_verify_target``). The v2 dose
    (neither) takes its target and first guess from the readout's KL (``outputs``)."""
    from experiments.identify.stages.directions import REFERENCE
    from experiments.identify.stages.matched import MATCHED, match_dose, matching_split

    lm, config, run_dir = steering.lm, steering.config, steering.run_dir
    layer, alpha, betas = steering.layer, steering.alpha, steering.betas
    ident, lk = config.identify, config.likelihood
    concept_free = ident.dose_kl == "concept_free"
    if concept_free and words is None:
        raise ValueError("identify.dose_kl: concept_free needs each concept's words")
    path = run_dir.file(RunDir.DOSE)
    records = read_jsonl(path)
    done = {r["concept"] for r in records}
    for i, concept in enumerate(subset):
        if concept in done:
            continue
        mine = steering.directions.of(concept)
        ids = [d.id for d in mine]
        progress(f"dose: concept {i + 1}/{len(subset)} ({len(ids)} directions, KL matched)")
        dirs = stacked(mine)
        scale = betas[concept] * alpha
        exclude = concept_token_ids(lm, words[concept]) if concept_free and words else []

        def kl_at(
            k: np.ndarray, at: Sequence[int], on: list[str] = prompts[concept],
            d: torch.Tensor = dirs, c: float = scale, out: list[int] = exclude,
        ) -> np.ndarray:  # fmt: skip
            coefs = torch.as_tensor(np.asarray(k) * c, dtype=torch.float32)
            chosen = [on[q] for q in at]
            return next_token_kl(lm, chosen, layer, d, coefs, lk.batch_size, exclude=out)

        n_prompts = len(prompts[concept])
        matching, verifying = (
            matching_split(n_prompts, config.seed)
            if ident.dose_verify
            else (list(range(n_prompts)), [])
        )
        at_one = None
        if not concept_free and not ident.dose_verify:  # v2: the readout's KL at β
            at_one = np.array([float(np.mean(outputs[(concept, d)]["kl"])) for d in ids])
        dose = match_dose(kl_at, len(ids), ids.index(REFERENCE), matching, verifying, at_one=at_one)
        doses: dict[str, tuple[np.ndarray, np.ndarray]] = {MATCHED: (dose.multiplier, dose.kl)}
        for m in ident.subset_doses:
            fixed = np.full(len(ids), float(m))
            doses[f"{m:g}x"] = (fixed, kl_at(fixed, matching).mean(axis=1))
        kind = {"kl_kind": ident.dose_kl} if concept_free else {}
        rows = []
        unsteered = UnsteeredLoglik()  # the concept's texts' L_0, scored once for every dose
        for label, (mult, kl) in doses.items():
            directions = [
                Direction(concept, d, dirs[j], dose=float(mult[j])) for j, d in enumerate(ids)
            ]
            scored = likelihood_outcomes(
                lm,
                layer,
                scale,
                {concept: texts.on[concept]},
                {concept: texts.off[concept]},
                directions,
                [1.0],
                config.steering.mode,
                lk.prefix,
                batch_size=lk.batch_size,
                unsteered=unsteered,
            )
            at = {d: j for j, d in enumerate(ids)}
            verify = dose.verify_kl if label == MATCHED else None
            rows += [
                {
                    **{k: v for k, v in r.items() if k != "arm"},
                    "direction": (d := r["arm"]),
                    "dose": label,
                    "multiplier": float(mult[at[d]]),
                    "kl": float(kl[at[d]]),
                    "kl_target": dose.target,
                    "beta": betas[concept],
                    **kind,
                    **(
                        {"kl_verify": float(verify[at[d]]), "kl_verify_target": dose.verify_target}
                        if verify is not None
                        else {}
                    ),
                }
                for r in scored
            ]
        append_jsonl(path, rows)
        records += rows
    return records
