"""llama.cpp with several sequences in one batch: the peer llama-cpp-python allows.

The high-level ``Llama`` class decodes one sequence; the low-level API it wraps
(``llama_batch`` with sequence ids, ``llama_decode``, one sampler chain per sequence)
decodes many at once. What it cannot do is steer rows differently: a control vector
(``llama_set_adapter_cvec``) belongs to the whole context. So rows are grouped by
(direction, strength), every strength-0 row in one group, and each group is one
multi-sequence batch with its vector set; on the default grid that is one group of 30
unsteered rows and 20 groups of 3.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from experiments.bench.core.measure import Measurement
from experiments.bench.core.workload import Workload
from experiments.bench.llamacpp.llama import llama_layer_index, set_cvec
from steering.generation import GenerationRow

LLAMA_BATCHED = "llama.cpp_multi_sequence"

HOW = (
    "llama-cpp-python's low-level API: one llama_batch holding every sequence of a group "
    "(seq ids, prefill then one token per live sequence per llama_decode), a sampler chain "
    "per sequence (top_p, temperature, dist seeded with the row seed), a fresh KV per "
    "group; the control vector is per context, so rows are grouped by (direction, "
    "strength) and every strength-0 row shares one group"
)


def cvec_groups(wl: Workload, rows: Sequence[GenerationRow]) -> list[list[GenerationRow]]:
    """Rows that can share one context: the same direction and strength (or strength 0)."""
    groups: dict[tuple[int, float], list[GenerationRow]] = {}
    for r in rows:
        s = wl.strengths[r.key]
        groups.setdefault((-1, 0.0) if s == 0.0 else (r.direction, s), []).append(r)
    return list(groups.values())


@dataclass
class MultiSequence:
    """A llama.cpp context with room for ``n_seq`` sequences, over an open ``Llama``."""

    llm: Any  # llama_cpp.Llama: the model, its tokenizer
    ctx: Any
    n_seq: int
    n_ctx: int

    @classmethod
    def open(cls, llm: Any, n_seq: int, per_seq_tokens: int, threads: int) -> MultiSequence:
        import llama_cpp

        n_seq = max(1, min(n_seq, int(llama_cpp.llama_max_parallel_sequences())))
        params = llama_cpp.llama_context_default_params()
        n_ctx = n_seq * per_seq_tokens
        params.n_ctx = n_ctx
        params.n_batch = n_ctx
        params.n_ubatch = min(n_ctx, 512)
        params.n_seq_max = n_seq
        params.kv_unified = True
        params.n_threads = threads
        params.n_threads_batch = threads
        ctx = llama_cpp.llama_init_from_model(llm.model, params)
        if ctx is None:
            raise RuntimeError("llama_init_from_model failed for the multi-sequence context")
        return cls(llm, ctx, n_seq, n_ctx)

    def close(self) -> None:
        import llama_cpp

        if self.ctx is not None:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None

    def generate(
        self, wl: Workload, rows: Sequence[GenerationRow], n_layers: int
    ) -> list[list[int]]:
        """New token ids per row (EOG not included), all rows decoded together."""
        import llama_cpp

        if len(rows) > self.n_seq:
            raise ValueError(f"{len(rows)} rows do not fit {self.n_seq} sequences")
        s = wl.sampling
        strength = wl.strengths[rows[0].key]
        vector = wl.vectors[rows[0].direction]
        coefficient = float(vector.coefficients(strength)[0]) if strength != 0.0 else 0.0
        n_embd = self.llm.n_embd()
        set_cvec(
            self.ctx, n_embd, vector.direction, coefficient, llama_layer_index(wl.layer), n_layers
        )
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)
        vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        prompts = [self.llm.tokenize(r.prompt.encode("utf-8"), special=True) for r in rows]
        batch = llama_cpp.llama_batch_init(max(sum(map(len, prompts)), len(rows)), 0, 1)
        chains = [_sampler(s, r.seed) for r in rows]
        try:
            entries = [
                (t, pos, seq, pos == len(p) - 1)
                for seq, p in enumerate(prompts)
                for pos, t in enumerate(p)
            ]
            positions = [len(p) for p in prompts]
            out: list[list[int]] = [[] for _ in rows]
            live = list(range(len(rows)))
            for _ in range(s.max_new_tokens):
                logit_index = _decode(self.ctx, batch, entries)
                entries = []
                for seq in live:
                    token = llama_cpp.llama_sampler_sample(chains[seq], self.ctx, logit_index[seq])
                    if llama_cpp.llama_vocab_is_eog(vocab, token):
                        continue
                    out[seq].append(int(token))
                    if len(out[seq]) < s.max_new_tokens:
                        entries.append((int(token), positions[seq], seq, True))
                        positions[seq] += 1
                live = [e[2] for e in entries]
                if not live:
                    break
        finally:
            for chain in chains:
                llama_cpp.llama_sampler_free(chain)
            llama_cpp.llama_batch_free(batch)
        return out


def _sampler(sampling: Any, seed: int) -> Any:
    """The chain create_completion builds for our settings: top_p, temperature, dist."""
    import llama_cpp

    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    if sampling.greedy:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        return chain
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1))
    llama_cpp.llama_sampler_chain_add(
        chain, llama_cpp.llama_sampler_init_temp(sampling.temperature)
    )
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed % (2**31)))
    return chain


def _decode(ctx: Any, batch: Any, entries: list[tuple[int, int, int, bool]]) -> dict[int, int]:
    """Decode ``(token, position, sequence, wants_logits)`` entries; the batch index of each
    sequence's logits."""
    import llama_cpp

    batch.n_tokens = len(entries)
    where: dict[int, int] = {}
    for i, (token, pos, seq, logits) in enumerate(entries):
        batch.token[i] = token
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = logits
        if logits:
            where[seq] = i
    rc = llama_cpp.llama_decode(ctx, batch)
    if rc != 0:
        raise RuntimeError(f"llama_decode failed with {rc}")
    return where


def open_multi_sequence(llm: Any, wl: Workload, threads: int) -> MultiSequence:
    """A context sized for the workload's largest group."""
    longest = max(len(llm.tokenize(r.prompt.encode("utf-8"), special=True)) for r in wl.rows)
    biggest = max(len(g) for g in cvec_groups(wl, wl.rows))
    return MultiSequence.open(llm, biggest, longest + wl.sampling.max_new_tokens + 8, threads)


def run_llama_batched(
    engine: MultiSequence,
    wl: Workload,
    rows: Sequence[GenerationRow] | None = None,
    n_layers: int = 0,
    m: Measurement | None = None,
) -> Measurement:
    """One timed pass over ``rows`` (default: all), one multi-sequence batch per group."""
    rows = list(wl.rows if rows is None else rows)
    m = m or Measurement(rows=len(rows))
    groups = cvec_groups(wl, rows)
    tokens = 0
    start = time.perf_counter()
    for group in groups:
        for i in range(0, len(group), engine.n_seq):
            tokens += sum(
                len(t) for t in engine.generate(wl, group[i : i + engine.n_seq], n_layers)
            )
    m.add(time.perf_counter() - start, tokens)
    m.extra["groups"] = len(groups)
    m.extra["largest_group"] = max((len(g) for g in groups), default=0)
    return m
