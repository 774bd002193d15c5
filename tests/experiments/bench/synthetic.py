"""A synthetic bench workload on any model: random unit directions on the Phase 5 grid
layout. The bench tests time it; what a row costs does not depend on its direction."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from experiments.bench.core.workload import Workload
from experiments.kernel.plan import row_key, row_seed
from steering.generation import GenerationRow, SamplingConfig
from steering.models import LoadedModel
from steering.vector import SteeringVector


def synthetic_workload(
    lm: LoadedModel,
    n_concepts: int = 2,
    prompts: Sequence[str] = ("Tell me about something.", "Here is a story:"),
    strengths: Sequence[float] = (-1.0, 0.0, 1.0),
    max_new_tokens: int = 8,
    batch_size: int = 96,
    layer: int | None = None,
    alpha: float = 1.0,
    beta: float = 0.2,
    seed: int = 0,
) -> Workload:
    """Random unit directions on the Phase 5 grid layout."""
    layer = lm.check_layer(lm.default_layer if layer is None else layer)
    gen = torch.Generator().manual_seed(seed)
    vectors = [
        SteeringVector.from_direction(
            torch.randn(lm.hidden_size, generator=gen), layer, alpha=alpha, beta=beta
        )
        for _ in range(n_concepts)
    ]
    rows, by_key = [], {}
    for c, vector in enumerate(vectors):
        for p, prompt in enumerate(prompts):
            row_s = row_seed(seed, f"concept{c}", p, 0)
            for s in strengths:
                key = row_key(f"concept{c}", p, 0, s)
                rows.append(GenerationRow(key, prompt, row_s, c, float(vector.coefficients(s)[0])))
                by_key[key] = float(s)
    return Workload(
        rows=rows,
        directions=torch.stack([v.direction for v in vectors]),
        vectors=vectors,
        strengths=by_key,
        layer=layer,
        mode="additive",
        sampling=SamplingConfig(max_new_tokens=max_new_tokens),
        batch_size=batch_size,
        seed=seed,
    )
