"""The device seam of batched decoding: a decode policy, chosen once per loaded model.

``generate_batch`` (steering/generation.py) is the loop every device shares: it
tokenises, draws each row's uniforms, runs a policy's decoder one step at a time, asks
it now and then whether every row has stopped, and decodes the tokens. How a step runs
is the policy's business, in the way vLLM's ``CustomOp`` picks ``forward_cuda``,
``forward_cpu`` or ``forward_native`` once when a layer is built instead of branching on
the device inside every call:

- :class:`ReferencePolicy`, the simplest correct decode: the model's own (dynamic) KV
  cache, the single-product output head, one stable sort of the vocabulary per step
  (:func:`~steering.sampling.sorted_pick`), the host checks for EOS after every step.
  The tests hold the other policies to it.
- :class:`CpuPolicy`, the CPU default, tuned on 2 cores: the top-k prefilter, the blocked
  output head writing into reused logits (steering/head.py), reused per-step tensors
  (steering/scratch.py), log-softmax only for the rows that want log-probabilities.
  Its texts are bit-identical to the loop it was cut out of.
- ``CudaPolicy`` (steering/decode_cuda.py): a preallocated (static) KV cache, the decode
  step captured in a CUDA graph per batch-size bucket, sampling inside the step, EOS
  checked every few steps.

Every policy records a step the same way (:meth:`DecodeState.record`), so EOS, padding
and lengths mean the same everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch

from steering.head import reused_logits, single_product
from steering.models import LoadedModel
from steering.sampling import TOPK_PREFILTER, SamplingConfig, sample_next, sorted_pick
from steering.scratch import Scratch
from steering.vector import Layers, Mode, steer_layers


@dataclass
class DecodeBatch:
    """One batch as the shared loop hands it to a policy (tensors on the model's device,
    except the steering, which the hook casts)."""

    input_ids: torch.Tensor  # [rows, width], left-padded
    attention_mask: torch.Tensor  # [rows, width]
    positions: torch.Tensor  # [rows, width]: each row counts from its first real token
    u: torch.Tensor  # [rows, steps]: row i's uniform for step t, from its own seed
    eos: torch.Tensor  # token ids that end a row
    banned: torch.Tensor  # token ids never sampled
    pad_id: int
    row_dirs: torch.Tensor  # [rows, hidden], or [rows, len(layer), hidden] for several layers
    coefs: torch.Tensor  # [rows]
    layer: Layers
    mode: Mode
    sampling: SamplingConfig
    lp_rows: list[int] | None  # rows that want log-probs (None: all)

    @property
    def n_rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def steps(self) -> int:
        return self.sampling.max_new_tokens


class DecodeState:
    """What a decode produces, per row: tokens, their log-probs, whether and where it
    stopped. ``record`` updates it in place, so a captured CUDA graph can do it too."""

    def __init__(self, rows: int, steps: int, pad_id: int, eos: torch.Tensor) -> None:
        device = eos.device
        self.pad_id = pad_id
        self.eos = eos
        self.tokens = torch.full((rows, steps), pad_id, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(rows, steps, device=device)
        self.done = torch.zeros(rows, dtype=torch.bool, device=device)
        self.lengths = torch.full((rows,), steps, dtype=torch.long, device=device)

    def record(self, step: int | torch.Tensor, nxt: torch.Tensor, lp: torch.Tensor) -> torch.Tensor:
        """Write one step's tokens and log-probs; rows already stopped get padding, and a
        row that now samples EOS stops with its length set to ``step`` (EOS not kept).
        ``step`` is an int, or a one-element tensor inside a captured graph. Returns the
        tokens to feed back (padding for the stopped rows)."""
        nxt = torch.where(self.done, torch.full_like(nxt, self.pad_id), nxt)
        if isinstance(step, torch.Tensor):
            self.tokens.index_copy_(1, step, nxt[:, None])
            self.logprobs.index_copy_(1, step, lp[:, None].to(self.logprobs.dtype))
        else:
            self.tokens[:, step] = nxt
            self.logprobs[:, step] = lp
        hit_eos = (nxt[:, None] == self.eos[None, :]).any(dim=-1) & ~self.done
        # where, not masked_fill_: a fill value on the device would be read on the host
        stop = step if isinstance(step, int) else step[0]
        self.lengths.copy_(torch.where(hit_eos, stop, self.lengths))
        self.done.logical_or_(hit_eos)
        return nxt


class Decoder(Protocol):
    """One batch's decode, one step per call."""

    @property
    def state(self) -> DecodeState:
        """What the decode has produced so far (tokens, log-probs, where rows stopped)."""

    def step(self, step: int) -> None:
        """Run decode step ``step`` (0 is the prompt's forward pass) and record it."""

    def all_done(self) -> bool:
        """Whether every row has stopped (a host synchronisation)."""


class DecodePolicy:
    """How a loaded model decodes; ``decoder`` opens one batch's decode."""

    name: ClassVar[str] = ""
    # generate_batch asks all_done() after steps eos_every - 1, 2 * eos_every - 1, ...
    eos_every: ClassVar[int] = 1

    def decoder(self, lm: LoadedModel, batch: DecodeBatch) -> AbstractContextManager[Decoder]:
        raise NotImplementedError


class DynamicSteps:
    """The forward pass with the model's own KV cache: the prompt first, then one token
    per step, the attention mask grown by one column each time."""

    def __init__(self, lm: LoadedModel, batch: DecodeBatch) -> None:
        self.lm = lm
        self.cache = None
        self.ids, self.mask, self.pos = batch.input_ids, batch.attention_mask, batch.positions

    def logits(self) -> torch.Tensor:
        """The next-token logits of the current step, ``[rows, vocab]``."""
        out = self.lm.model(
            input_ids=self.ids,
            attention_mask=self.mask,
            position_ids=self.pos,
            cache=self.cache,  # transformers 5.24's name; past_key_values warns, goes in 5.40
            use_cache=True,
            logits_to_keep=1,
        )
        self.cache = out.cache
        logits: torch.Tensor = out.logits[:, -1, :]
        return logits

    def advance(self, nxt: torch.Tensor) -> None:
        self.ids = nxt[:, None]
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=-1)
        self.pos = self.pos[:, -1:] + 1


class ReferenceDecoder:
    """The plain decode: full log-softmax, a stable full sort, nothing reused."""

    def __init__(self, lm: LoadedModel, batch: DecodeBatch) -> None:
        self.batch = batch
        self.forward = DynamicSteps(lm, batch)
        self.state = DecodeState(batch.n_rows, batch.steps, batch.pad_id, batch.eos)

    def step(self, step: int) -> None:
        b = self.batch
        logits = self.forward.logits().float()
        logp = torch.log_softmax(logits, dim=-1)  # of the distribution before the ban
        allowed = logits.index_fill(1, b.banned, float("-inf"))
        nxt = sorted_pick(allowed, b.u[:, step], b.sampling)
        nxt = self.state.record(step, nxt, logp.gather(1, nxt[:, None])[:, 0])
        self.forward.advance(nxt)

    def all_done(self) -> bool:
        return bool(self.state.done.all())


class ReferencePolicy(DecodePolicy):
    name = "reference"

    @contextmanager
    def decoder(self, lm: LoadedModel, batch: DecodeBatch) -> Iterator[ReferenceDecoder]:
        with (
            steer_layers(lm, batch.layer, batch.row_dirs, batch.coefs, batch.mode),
            single_product(lm.model),
        ):
            yield ReferenceDecoder(lm, batch)


class CpuDecoder(ReferenceDecoder):
    """The CPU's decode step: prefiltered sampling into reused tensors, and a log-softmax
    over the vocabulary only for the rows whose log-probs are wanted (the reference
    decoder's forward pass and state)."""

    def __init__(self, lm: LoadedModel, batch: DecodeBatch) -> None:
        super().__init__(lm, batch)
        self.scratch = Scratch()
        self.lp_rows = (
            None
            if batch.lp_rows is None
            else torch.tensor(batch.lp_rows, dtype=torch.long, device=batch.input_ids.device)
        )

    def step(self, step: int) -> None:
        b = self.batch
        logits = self.forward.logits()
        # The reported log-prob is of the unmasked distribution; the mask then goes in
        # place (out.logits is not used again): no copy of [rows, vocab] per step.
        # A row's log-softmax is the same alone as in its batch, so only the rows
        # that want log-probs pay for one: copied out together (one log-softmax runs its
        # rows on every core; one per row ran on one core, 11 ms against 7.5 for 30 rows).
        if self.lp_rows is None:
            logp = torch.log_softmax(logits.float(), dim=-1)
        else:
            shape = (len(self.lp_rows), logits.shape[1])
            wanted = self.scratch.take("lp_logits", shape, logits)
            wanted = torch.index_select(logits, 0, self.lp_rows, out=wanted).float()
            out = self.scratch.take("logp", shape, wanted)
            logp = torch.log_softmax(wanted, dim=-1, out=out)
        allowed = logits.float().index_fill_(1, b.banned, float("-inf"))
        nxt = sample_next(allowed, b.u[:, step], b.sampling, TOPK_PREFILTER, self.scratch)
        if self.lp_rows is None:
            lp = logp.gather(1, nxt[:, None])[:, 0]
        else:
            lp = torch.zeros(b.n_rows, device=logits.device)
            lp[self.lp_rows] = logp.gather(1, nxt[self.lp_rows][:, None])[:, 0]
        del logp
        nxt = self.state.record(step, nxt, lp)
        self.forward.advance(nxt)


class CpuPolicy(DecodePolicy):
    name = "cpu"

    @contextmanager
    def decoder(self, lm: LoadedModel, batch: DecodeBatch) -> Iterator[CpuDecoder]:
        # Each step is done with its logits before the next forward pass: one tensor serves all.
        with (
            steer_layers(lm, batch.layer, batch.row_dirs, batch.coefs, batch.mode),
            reused_logits(lm.model),
        ):
            yield CpuDecoder(lm, batch)
