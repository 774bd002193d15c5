"""Stage: the generation plan, every row a run will generate, with its seed.

Rows that differ only in strength share a seed (common random numbers), so Δ_s − Δ_0
is a paired comparison; a row's seed never depends on batching, so a resumed or
re-batched run gives the same texts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from experiments.concepts import ConceptGraph
from experiments.config import ExperimentConfig
from experiments.pipeline.vectors import VectorSet
from experiments.prompts import render_generation_prompts
from steering.generation import GenerationRow


def row_seed(seed: int, synset: str, prompt_index: int, sample: int) -> int:
    """The same seed for every strength of a (concept, prompt, sample): common random numbers."""
    digest = hashlib.sha256(f"{seed}|{synset}|{prompt_index}|{sample}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def row_key(synset: str, prompt_index: int, sample: int, strength: float) -> str:
    return f"{synset}|p{prompt_index}|n{sample}|s{strength:+.3f}"


@dataclass
class GenerationPlan:
    """The rows to generate and, per row key, what the row means (concept, prompt, ...)."""

    concepts: list[str]  # direction index -> synset
    rows: list[GenerationRow]
    meta: dict[str, dict]

    def pending(self, done: set[str]) -> list[GenerationRow]:
        return [r for r in self.rows if r.key not in done]


def planned_rows(config: ExperimentConfig, graph: ConceptGraph) -> Iterator[tuple[str, dict]]:
    """(key, meta) for every row of the grid, in plan order; no model needed."""
    for concept in graph.concepts:
        prompts = render_generation_prompts(concept, config.generation.prompts)
        for p_idx, prompt in enumerate(prompts):
            for sample in range(config.generation.samples_per_prompt):
                seed = row_seed(config.seed, concept.synset, p_idx, sample)
                for strength in config.steering.strengths:
                    yield (
                        row_key(concept.synset, p_idx, sample, strength),
                        {
                            "concept": concept.synset,
                            "concept_name": concept.name,
                            "prompt_index": p_idx,
                            "prompt": prompt,
                            "sample": sample,
                            "strength": float(strength),
                            "seed": seed,
                        },
                    )


def build_plan(config: ExperimentConfig, graph: ConceptGraph, vectors: VectorSet) -> GenerationPlan:
    rows, meta = [], {}
    order = [c.synset for c in graph.concepts]
    index = {synset: k for k, synset in enumerate(order)}
    for key, m in planned_rows(config, graph):
        vector = vectors.vectors[m["concept"]]
        coefficient = float(vector.coefficients(m["strength"])[0])
        rows.append(GenerationRow(key, m["prompt"], m["seed"], index[m["concept"]], coefficient))
        meta[key] = m
    return GenerationPlan(order, rows, meta)
