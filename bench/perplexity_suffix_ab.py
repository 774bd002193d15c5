"""The perplexity pass with and without steering/suffix.py, alternated in one process.

On the latest default run's 120 steered texts (re-tokenised; the states come from an
unsteered pass, the same shapes as the decode's). Run after `make run`:
`.venv/bin/python bench/perplexity_suffix_ab.py > bench/perplexity_suffix_ab.json`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from steering.generation import continuation_nll
from steering.models import load_model
from steering.suffix import capture_layer_states

LAYER, BATCH = 9, 96


def main() -> None:
    run = max(Path("results/phase5").glob("*/"), key=lambda p: p.stat().st_mtime)
    with (run / "generations.jsonl").open() as f:
        rows = [json.loads(line) for line in f]
    rows = [r for r in rows if r["strength"] != 0][:120]
    lm = load_model("embedded")
    tok = lm.tokenizer
    prompts = [r["prompt"] for r in rows]
    conts = [tok(r["text"], add_special_tokens=False)["input_ids"][:50] for r in rows]
    states = []
    with torch.inference_mode():
        for prompt, cont in zip(prompts, conts, strict=True):
            got: list[torch.Tensor] = []
            with capture_layer_states(lm, LAYER, got):
                ids = tok(prompt)["input_ids"] + cont[:-1]
                lm.model(input_ids=torch.tensor([ids]), logits_to_keep=1)
            states.append(got[0][0])
    out: dict[str, list[float]] = {}
    for _ in range(2):
        for name in ("full", "suffix"):
            started = time.perf_counter()
            for s in range(0, len(rows), BATCH):
                part = slice(s, s + BATCH)
                suffix = name == "suffix"
                continuation_nll(
                    lm,
                    prompts[part],
                    conts[part],
                    states=states[part] if suffix else None,
                    from_layer=LAYER + 1 if suffix else None,
                )
            out.setdefault(name, []).append(round(time.perf_counter() - started, 2))
    positions = sum(len(tok(p)["input_ids"]) + len(c) for p, c in zip(prompts, conts, strict=True))
    print(json.dumps({"rows": len(rows), "positions": positions, **out}))


if __name__ == "__main__":
    main()
