"""Stage: the generation plan, every row a run will generate, with its seed.

Rows that differ only in what steers them (strength, β, the concept direction, a random
direction or an instruction) share a seed (common random numbers), so every steered
row is paired with one unsteered twin and Δ_s − Δ_0 is a paired comparison. A row's
seed never depends on batching, so a resumed or re-batched run gives the same texts.

Arms (what steers a row):
- ``concept``: the concept's own direction, s·β·α (the seed's rows; their keys are the
  seed's keys, so earlier runs stay comparable);
- ``random:j``: the j-th random unit direction for the concept, same α·β (the null);
- ``prompt``: no vector, an instruction prefixed to the prompt (the prompting baseline).
The unsteered row (s = 0) is shared by every arm: steering with strength 0 is the same
generation whatever the direction.

With ``selection.mode: heldout`` each concept's prompts are split: the *selection*
prompts are generated over the β grid (concept arm only) and β is chosen per concept
there; the *report* prompts are generated at the chosen β with every arm, and only
they enter the criteria.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

from experiments.concepts import Concept, ConceptGraph
from experiments.config import RunConfig
from experiments.kernel.vectors import VectorSet
from experiments.prompts import render_generation_prompts
from steering.generation import GenerationRow

CONCEPT_ARM = "concept"
PROMPT_ARM = "prompt"


def random_arm(j: int) -> str:
    return f"random:{j}"


def row_seed(seed: int, synset: str, prompt_index: int, sample: int) -> int:
    """The same seed for every strength of a (concept, prompt, sample): common random numbers."""
    digest = hashlib.sha256(f"{seed}|{synset}|{prompt_index}|{sample}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def row_key(
    synset: str,
    prompt_index: int,
    sample: int,
    strength: float,
    arm: str = CONCEPT_ARM,
    beta: float | None = None,
    vectors: str | None = None,
) -> str:
    """The row's id. The seed's rows (concept arm at the run's one β) keep the seed's form;
    ``vectors`` names the probe set a concept-arm row was steered with when one run
    steers with several (the calibration study)."""
    key = f"{synset}|p{prompt_index}|n{sample}|s{strength:+.3f}"
    if strength != 0 and arm != CONCEPT_ARM:
        key += f"|{arm}"
    if strength != 0 and arm == CONCEPT_ARM and vectors:
        key += f"|v{vectors}"
    if strength != 0 and beta is not None:
        key += f"|b{beta:g}"
    return key


def split_prompts(n_prompts: int, config: RunConfig) -> tuple[list[int], list[int]]:
    """(selection, report) prompt indices; without held-out selection all are report."""
    indices = list(range(n_prompts))
    if config.selection.mode != "heldout":
        return [], indices
    n_select = min(
        n_prompts - 1, max(1, math.floor(n_prompts * config.selection.selection_prompts))
    )
    return indices[:n_select], indices[n_select:]


@dataclass
class GenerationPlan:
    """The rows to generate and, per row key, what the row means (concept, prompt, arm...)."""

    directions: list[str]  # direction index -> "synset" or "synset|random:j"
    rows: list[GenerationRow]
    meta: dict[str, dict[str, Any]]

    def pending(self, done: set[str]) -> list[GenerationRow]:
        return [r for r in self.rows if r.key not in done]


def prompt_signs(config: RunConfig) -> list[int]:
    """Per prompt index, the sign of the strengths it is generated at: 0 for every
    strength; with ``generation.suppression_prompts``, +1 for the neutral prompts (s ≥ 0)
    and −1 for the concept-naming ones that follow them (s ≤ 0)."""
    g = config.generation
    if g.suppression_prompts is None:
        return [0] * len(g.prompts)
    return [1] * len(g.prompts) + [-1] * len(g.suppression_prompts)


def _units(config: RunConfig, concept: Concept, split: str) -> Iterator[dict[str, Any]]:
    """One dict per (prompt, sample) of ``split`` with the fields every row of it shares.

    With suppression prompts, the neutral and the concept-naming prompts are split into
    selection and report halves each (their indices follow one another)."""
    g = config.generation
    prompts = render_generation_prompts(concept, [*g.prompts, *(g.suppression_prompts or [])])
    selection, report = split_prompts(len(g.prompts), config)
    if g.suppression_prompts is not None:
        offset = len(g.prompts)
        naming = split_prompts(len(g.suppression_prompts), config)
        selection += [offset + i for i in naming[0]]
        report += [offset + i for i in naming[1]]
    samples = config.generation.samples_per_prompt
    if split == "selection" and config.selection.samples_per_prompt is not None:
        samples = config.selection.samples_per_prompt
    for p_idx in selection if split == "selection" else report:
        for sample in range(samples):
            yield {
                "concept": concept.synset,
                "concept_name": concept.name,
                "prompt_index": p_idx,
                "prompt": prompts[p_idx],
                "sample": sample,
                "seed": row_seed(config.seed, concept.synset, p_idx, sample),
                "split": split,
            }


def _arms(config: RunConfig) -> list[str]:
    arms = [CONCEPT_ARM]
    arms += [random_arm(j) for j in range(config.controls.random_directions)]
    if config.controls.prompt_baseline:
        arms.append(PROMPT_ARM)
    return arms


def planned_rows(
    config: RunConfig,
    graph: ConceptGraph,
    split: str = "report",
    betas: Mapping[str, float] | None = None,
    vectors: str | None = None,
    null_arms: bool = False,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, meta) for every row of one split, in plan order; no model needed.

    ``betas`` gives the report split's β per concept (from held-out selection); without
    it every concept uses ``steering.beta``. The selection split covers the β grid;
    with ``null_arms`` it is generated instead at one β (``betas``, else
    ``steering.beta``) with the concept arm and the random directions, the null
    (``--layer auto-effect``, ``kernel/layers.py``: no prompt arm, which no layer moves).
    ``vectors`` tags the concept arm's rows with a probe-set name (see :func:`row_key`).
    """
    heldout = config.selection.mode == "heldout"
    signs = prompt_signs(config)
    for concept in graph.concepts:
        for unit in _units(config, concept, split):
            sign = signs[unit["prompt_index"]]
            if split == "selection" and not null_arms:
                cells = [
                    (CONCEPT_ARM, s, b)
                    for b in config.selection.beta_grid
                    for s in config.steering.strengths
                ]
            else:
                # a run resolves steering.beta auto first (strength_range.choose_beta)
                beta = cast(float, (betas or {}).get(concept.synset, config.steering.beta))
                arms = [a for a in _arms(config) if split == "report" or a != PROMPT_ARM]
                cells = [(arm, s, beta) for arm in arms for s in config.steering.strengths]
            seen: set[str] = set()
            for arm, strength, beta in cells:
                if sign and strength * sign < 0:  # a neutral prompt at s < 0, or the reverse
                    continue
                key = row_key(
                    concept.synset,
                    unit["prompt_index"],
                    unit["sample"],
                    strength,
                    arm,
                    beta if heldout else None,
                    vectors,
                )
                if key in seen:  # the unsteered twin is shared by every arm and β
                    continue
                seen.add(key)
                yield (
                    key,
                    {
                        **unit,
                        "strength": float(strength),
                        "arm": arm if strength != 0 else CONCEPT_ARM,
                        "beta": float(beta),
                        **(
                            {"vectors": vectors}
                            if vectors and strength and arm == CONCEPT_ARM
                            else {}
                        ),
                    },
                )


def run_rows(
    config: RunConfig, graph: ConceptGraph, betas: Mapping[str, float] | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, meta) of every row a run generates: the selection split's first when β is
    chosen on held-out prompts, then the report split's (at ``betas``)."""
    if config.selection.mode == "heldout":
        yield from planned_rows(config, graph, "selection")
    yield from planned_rows(config, graph, "report", betas)


def _instruction(config: RunConfig, concept_name: str, strength: float) -> str:
    c = config.controls
    template = c.prompt_positive if strength > 0 else c.prompt_negative
    return template.replace("{concept}", concept_name)


def build_plan(
    config: RunConfig,
    graph: ConceptGraph,
    vectors: VectorSet,
    split: str = "report",
    betas: Mapping[str, float] | None = None,
    vectors_tag: str | None = None,
    null_arms: bool = False,
) -> GenerationPlan:
    """Rows with their direction index, coefficient and (for the prompt arm) prompt;
    ``null_arms``: the selection split at one β with the null (:func:`planned_rows`)."""
    directions = [c.synset for c in graph.concepts]
    for c in graph.concepts:
        directions += [
            f"{c.synset}|{random_arm(j)}" for j in range(len(vectors.random.get(c.synset, [])))
        ]
    index = {name: i for i, name in enumerate(directions)}
    rows, meta = [], {}
    for key, m in planned_rows(config, graph, split, betas, vectors_tag, null_arms):
        synset, arm, strength = m["concept"], m["arm"], m["strength"]
        prompt = m["prompt"]
        if arm == PROMPT_ARM:
            direction = index[synset]
            prompt = _instruction(config, m["concept_name"], strength) + prompt
            m = {**m, "prompt": prompt, "base_prompt": m["prompt"]}
            coefficient = 0.0
        else:
            name = synset if arm == CONCEPT_ARM else f"{synset}|{arm}"  # the plan's direction
            vector = vectors.get(name)
            direction = index[name]
            if vector.beta != m["beta"]:
                vector = replace(vector, beta=m["beta"])
            coefficient = float(vector.coefficients(strength)[0])
        rows.append(GenerationRow(key, prompt, m["seed"], direction, coefficient))
        meta[key] = m
    return GenerationPlan(directions, rows, meta)
