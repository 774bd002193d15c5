"""Stratified sampling of generations for the blind rating.

Stratified over concept × strength so every cell of the design is represented (as
evenly as possible) and the ratings cover the whole range of Δ, not only the common
middle; seeded so an export can be reproduced byte for byte.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

from experiments.validation.runs import ScoredGeneration


def stratified_sample(
    records: Sequence[ScoredGeneration], n: int, seed: int
) -> list[ScoredGeneration]:
    """``n`` records spread over concept × strength cells as evenly as possible.

    Cell counts differ by at most one (until a cell runs out); among equally filled
    cells the next draw goes to the concept and the strength with the fewest draws so far,
    so both margins stay balanced too. Within a cell, prompts are cycled. Seeded.
    """
    rng = random.Random(seed)
    cells: dict[tuple[str, float], list[ScoredGeneration]] = defaultdict(list)
    for record in sorted(records, key=lambda r: r.key):
        cells[(record.concept, record.strength)].append(record)
    queues: dict[tuple[str, float], list[ScoredGeneration]] = {}
    for cell in sorted(cells):
        by_prompt: dict[int | None, list[ScoredGeneration]] = defaultdict(list)
        for record in cells[cell]:
            by_prompt[record.prompt_index].append(record)
        groups = [by_prompt[k] for k in sorted(by_prompt, key=str)]
        for group in groups:
            rng.shuffle(group)
        rng.shuffle(groups)
        longest = max(len(g) for g in groups)
        queues[cell] = [g[i] for i in range(longest) for g in groups if i < len(g)]
    n = min(n, sum(len(q) for q in queues.values()))
    taken: dict[tuple[str, float], int] = dict.fromkeys(queues, 0)
    per_concept: dict[str, int] = defaultdict(int)
    per_strength: dict[float, int] = defaultdict(int)
    chosen: list[ScoredGeneration] = []
    while len(chosen) < n:
        open_cells = [c for c in sorted(queues) if taken[c] < len(queues[c])]
        cell = min(
            open_cells,
            key=lambda c: (taken[c], per_concept[c[0]], per_strength[c[1]], rng.random()),
        )
        chosen.append(queues[cell][taken[cell]])
        taken[cell] += 1
        per_concept[cell[0]] += 1
        per_strength[cell[1]] += 1
    rng.shuffle(chosen)
    return chosen
