"""The CUDA decode policy: a static KV cache and the decode step in a CUDA graph.

On an H100 an eager decode step of Gemma 3 4B at 256 rows took about 81 ms, most of it
launching kernels one by one and growing the dynamic cache (docs/own-model.md); HF's
compiled static-cache ``generate`` took 28 ms but compiled for 150 s. This policy does
what that path does without the compiler:

- the KV cache is preallocated (transformers' ``StaticCache``) for the batch's rows,
  rounded up to a bucket, and ``capacity`` positions, so every decode step has the same
  shapes and the same tensor addresses;
- the attention masks of a decode step are built from the step counter on the device
  (padding from the prompt, causality, the sliding window), not by transformers' mask
  code, which reads the sliding layers' lengths from Python integers;
- the step (forward pass, the per-row steering hook, log-probs, the stable-sort top-p
  pick with the row's own uniform, EOS bookkeeping) only writes preallocated buffers and
  never waits on the host, so it is captured once per (rows bucket, capacity, steps,
  layer, mode, sampling) in a ``torch.cuda.CUDAGraph`` and replayed; the first decode
  steps of a new bucket run eagerly as the warm-up capture needs;
- the host asks whether every row has stopped every ``EOS_EVERY`` steps;
- on a card the step runs SDPA's memory-efficient attention and Gemma's RMS norm compiled
  into one kernel (steering/decode_kernels.py: 1.29-1.35x on an H100); the native
  kernels, ``kernels=NATIVE``, are what the tests hold the policy's logic to.

The same code runs eagerly (``graphs=False``, the default off CUDA), so the CPU tests
hold its arithmetic to the reference; only the capture needs a GPU. The capture is a
function of the step (``cuda_graph`` by default): the tests pass
``torch.compile(fullgraph=True)`` instead, which on the CPU fails on what a graph would
silently freeze, a Python value that changes from step to step
(tests/steering/test_decode_capture.py; it found transformers' sliding-window layers
counting in a Python int, see :func:`never_rolling`). A capture that fails at run time
falls back to the eager static step with one warning (``CaptureFallbackWarning``). Where the static
path cannot hold a batch (a prompt plus continuation longer than a sliding window, an
attention implementation whose masks it does not build) the policy decodes with the
reference decoder, checking EOS every ``EOS_EVERY`` steps.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch

from steering.decode import DecodeBatch, DecodePolicy, Decoder, DecodeState, ReferencePolicy
from steering.decode_kernels import FUSED, NATIVE, DecodeKernels, decode_kernels
from steering.head import single_product
from steering.models import LoadedModel
from steering.sampling import SamplingConfig, sorted_pick
from steering.vector import Layers, Mode, RowSteering, layer_directions, layer_shape, layer_tuple

if TYPE_CHECKING:
    from transformers import PreTrainedConfig, StaticCache

EOS_EVERY = 8
CAPACITY_QUANTUM = 64  # cache positions are allocated in multiples of this
WARMUP_STEPS = 2  # eager decode steps before a capture (cuBLAS and allocator warm-up)
MASKED_ATTENTION = ("sdpa", "eager")  # implementations whose 4D masks the step builds


def row_bucket(rows: int) -> int:
    """The batch size a decode runs at: 1, 2, 4, then multiples of 8 up to 256, then of
    64. Padding rows cost compute, a new bucket costs a capture and a cache."""
    if rows <= 4:
        return 1 << (rows - 1).bit_length()
    quantum = 8 if rows <= 256 else 64
    return -(-rows // quantum) * quantum


def static_capacity(lm: LoadedModel, width: int, steps: int) -> int | None:
    """Cache positions for a prompt of ``width`` and ``steps`` new tokens, or None when the
    static step cannot run it: it needs every sliding-window layer to hold the whole
    sequence (so that no layer ever rolls its window) and masks it knows how to build."""
    config = lm.text_config
    if getattr(config, "_attn_implementation", "sdpa") not in MASKED_ATTENTION:
        return None
    need = width + steps
    cap = -(-need // CAPACITY_QUANTUM) * CAPACITY_QUANTUM
    window = _sliding_window(config)
    if window is not None:
        if need > window:
            return None
        cap = min(cap, window)
    return cap


def never_rolling(cache: StaticCache) -> None:
    """Give ``cache`` sliding-window layers that keep their length in a tensor only.

    transformers' ``StaticSlidingWindowLayer`` also counts its length in a Python int
    each ``update``, to choose between writing in place and rolling the window: a
    captured step would freeze that int at its capture value (the capture-safety test
    failed on it with a recompile). The static step never lets a window fill
    (:func:`static_capacity`), so the plain static layer's in-place write, whose
    position is a tensor on the device, is what every step does; the int stays at 0,
    which is what the eager prefill's masks read."""
    from transformers.cache_utils import StaticLayer, StaticSlidingWindowLayer

    class NeverRollingLayer(StaticSlidingWindowLayer):
        update = StaticLayer.update

    for i, layer in enumerate(cache.layers):
        if type(layer) is StaticSlidingWindowLayer:
            window = layer.max_cache_len  # min(window, capacity): the capacity here
            cache.layers[i] = NeverRollingLayer(max_cache_len=window, sliding_window=window)


def _sliding_window(config: PreTrainedConfig) -> int | None:
    types = getattr(config, "layer_types", None) or []
    if "sliding_attention" in types or (not types and getattr(config, "sliding_window", None)):
        return int(config.sliding_window)
    return None


# Turns the decode step (a function of its buffers only) into its replay: on CUDA a
# recorded graph; in the tests on the CPU, torch.compile(fullgraph=True), which fails
# the same way on what a graph would silently freeze (a Python value that changes per
# step recompiles, and dynamo's error_on_recompile makes that an error).
Capture = Callable[[Callable[[], None]], Callable[[], None]]


def cuda_graph(step: Callable[[], None]) -> Callable[[], None]:
    """Record ``step`` in a CUDA graph (nothing runs) and return its replay."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


class CaptureFallbackWarning(RuntimeWarning):
    """The decode step could not be captured; the run decodes eagerly (same numbers)."""


@dataclass(frozen=True)
class StaticKey:
    model: int  # id() of the model module: a policy object may be shared by copies of lm
    rows: int
    capacity: int
    steps: int
    layer: Layers
    mode: Mode
    sampling: SamplingConfig


class StaticDecode:
    """The buffers, cache, steering hook and (on CUDA) graph of one :class:`StaticKey`.

    Everything the captured step reads or writes lives here at a fixed address; a new
    batch is copied in (:meth:`load`) and the cache reset, so the graph replays for it.
    Once loaded it is the batch's decoder: step 0 prefills, later steps decode."""

    def __init__(
        self,
        lm: LoadedModel,
        key: StaticKey,
        batch: DecodeBatch,
        graphs: bool,
        capture: Capture,
        on_capture_failure: Callable[[BaseException], None],
    ) -> None:
        from transformers import StaticCache

        dev, rows, cap = lm.device, key.rows, key.capacity
        self.lm, self.key, self.graphs = lm, key, graphs
        config = lm.text_config
        self.window = _sliding_window(config)
        self.mask_per_type = bool(getattr(config, "layer_types", None))  # a mask per layer type
        self.additive = getattr(config, "_attn_implementation", "sdpa") == "eager"
        self.cache = StaticCache(config=lm.model.config, max_cache_len=cap)
        never_rolling(self.cache)
        self.ids = torch.zeros(rows, 1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(rows, 1, dtype=torch.long, device=dev)
        self.step_t = torch.zeros(1, dtype=torch.long, device=dev)  # the step being decoded
        self.slot_t = torch.zeros(1, dtype=torch.long, device=dev)  # its cache position
        self.slots = torch.arange(cap, device=dev)
        self.padding = torch.zeros(rows, cap, dtype=torch.bool, device=dev)
        self.u = torch.zeros(rows, key.steps, device=dev)
        self.eos = batch.eos.clone()
        self.banned = batch.banned.clone()
        self.state = DecodeState(rows, key.steps, batch.pad_id, self.eos)
        shape = (rows, *layer_shape(key.layer), lm.hidden_size)
        self.dirs = torch.zeros(shape, dtype=lm.dtype, device=dev)
        self.coefs = torch.zeros(rows, dtype=lm.dtype, device=dev)
        # one hook per steered layer, each on its view of the buffer
        self.hooks = {
            layer: RowSteering(d, self.coefs, key.mode)
            for layer, d in layer_directions(self.dirs, key.layer).items()
        }
        for hook in self.hooks.values():
            hook.inactive = False  # the graph must add, whatever the first batch's coefficients
        self.capture: Capture = capture
        self.on_capture_failure: Callable[[BaseException], None] = on_capture_failure
        self.replay: Callable[[], None] | None = None  # the captured step
        self.warm = 0
        self.width = 0

    # ------------------------------------------------------------------ per batch

    def load(self, batch: DecodeBatch) -> None:
        """Copy a batch into the buffers (rows beyond it repeat its first row, unsteered)
        and empty the cache."""
        n, rows = batch.n_rows, self.key.rows
        self.n_rows = n
        fill = torch.cat([torch.arange(n), torch.zeros(rows - n, dtype=torch.long)])
        fill_dev = fill.to(self.lm.device)
        self.ids_prompt = batch.input_ids.index_select(0, fill_dev)
        self.pos_prompt = batch.positions.index_select(0, fill_dev)
        self.width = int(batch.input_ids.shape[1])
        self.padding.fill_(True)
        self.padding[:, : self.width] = batch.attention_mask.index_select(0, fill_dev).bool()
        self.u.copy_(batch.u.index_select(0, fill_dev))
        self.dirs.copy_(
            batch.row_dirs.index_select(0, fill.to(batch.row_dirs.device)).to(self.dirs)
        )
        coefs = batch.coefs.index_select(0, fill).clone()
        coefs[n:] = 0.0
        self.coefs.copy_(coefs.to(self.coefs))
        self.state.tokens.fill_(self.state.pad_id)
        self.state.logprobs.zero_()
        self.state.done.zero_()
        self.state.lengths.fill_(self.key.steps)
        self.cache.reset()

    def prefill(self) -> None:
        """Step 0: the prompts' forward pass (eager; transformers builds its masks from the
        padding, as wide as the cache), then the first token."""
        out = self.lm.model(
            input_ids=self.ids_prompt,
            attention_mask=self.padding.long(),
            position_ids=self.pos_prompt,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        nxt = self._pick_and_record(out.logits[:, -1, :], 0)
        self.ids.copy_(nxt[:, None])
        self.pos.copy_(self.pos_prompt[:, -1:] + 1)
        self.slot_t.fill_(self.width)
        self.step_t.fill_(1)

    def decode(self) -> None:
        """One decode step on the buffers: what the CUDA graph captures."""
        visible = self.padding & (self.slots <= self.slot_t)
        masks: dict[str, torch.Tensor] = {"full_attention": visible}
        if self.window is not None:
            masks["sliding_attention"] = visible & (self.slots > self.slot_t - self.window)
        masks = {kind: self._as_attention_mask(m) for kind, m in masks.items()}
        out = self.lm.model(
            input_ids=self.ids,
            attention_mask=masks if self.mask_per_type else masks["full_attention"],
            position_ids=self.pos,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        nxt = self._pick_and_record(out.logits[:, -1, :], self.step_t)
        self.ids.copy_(nxt[:, None])
        self.pos.add_(1)
        self.slot_t.add_(1)
        self.step_t.add_(1)

    def step(self, step: int) -> None:
        """Step 0 prefills; steps 1, 2, ... decode eagerly, or warm up, capture once, then
        replay.

        A capture that fails (a driver, an allocator or an op that cannot be captured)
        hands this and every later step to the eager static step, which computes the
        same thing: the policy warns once and carries on instead of losing the run."""
        if step == 0:
            self.prefill()
        elif not self.graphs:
            self.decode()
        elif self.replay is not None:
            self.replay()
        elif self.warm < WARMUP_STEPS:
            self._warm_up()
            self.warm += 1
        else:
            try:
                self.replay = self.capture(self.decode)
                self.replay()
            except Exception as exc:  # whatever stops a capture, the eager step can do
                self.graphs, self.replay = False, None
                self.on_capture_failure(exc)
                self.decode()

    def all_done(self) -> bool:
        return bool(self.state.done[: self.n_rows].all())

    def _warm_up(self) -> None:
        """An eager step before the capture; on CUDA on a side stream, as capture needs."""
        if self.lm.device.type != "cuda":
            self.decode()
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.decode()
        torch.cuda.current_stream().wait_stream(side)

    # ------------------------------------------------------------------ inside the step

    def _as_attention_mask(self, visible: torch.Tensor) -> torch.Tensor:
        """``[rows, cap]`` visibility as the 4D mask the attention implementation takes."""
        mask = visible[:, None, None, :]
        if not self.additive:
            return mask  # sdpa: True attends
        low = torch.finfo(self.lm.dtype).min
        zero = torch.zeros((), dtype=self.lm.dtype, device=mask.device)
        return torch.where(mask, zero, torch.full_like(zero, low))

    def _pick_and_record(self, logits: torch.Tensor, step: int | torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        logp = torch.log_softmax(logits, dim=-1)  # of the distribution before the ban
        allowed = logits.index_fill(1, self.banned, float("-inf"))
        u = self.u[:, step] if isinstance(step, int) else self.u.index_select(1, step)[:, 0]
        nxt = sorted_pick(allowed, u, self.key.sampling)
        return self.state.record(step, nxt, logp.gather(1, nxt[:, None])[:, 0])


class CudaPolicy(DecodePolicy):
    """Static cache, sampling inside the step, CUDA graphs per batch-size bucket.

    ``graphs``: capture the decode step (default: when the model is on CUDA). ``kernels``:
    the attention and norm kernels the step runs (steering/decode_kernels.py; default:
    the fused ones on CUDA, the native ones, the tested reference, elsewhere). Keeps the
    last ``keep`` buckets' caches and graphs (a 4B cache of 1,024 rows x 128 positions
    is about 18 GB in bf16)."""

    name = "cuda"
    eos_every: ClassVar[int] = EOS_EVERY

    def __init__(
        self,
        graphs: bool | None = None,
        keep: int = 1,
        capture: Capture = cuda_graph,
        kernels: DecodeKernels | None = None,
    ) -> None:
        self.graphs = graphs
        self.kernels = kernels
        self.keep = keep
        self.capture = capture
        self.capture_failure: BaseException | None = None
        self._static: OrderedDict[StaticKey, StaticDecode] = OrderedDict()

    def _capture_failed(self, exc: BaseException) -> None:
        """Warn once; this policy captures nothing more (every bucket decodes eagerly)."""
        self.graphs = False
        if self.capture_failure is None:
            self.capture_failure = exc
            warnings.warn(
                f"capturing the decode step failed ({exc.__class__.__name__}: {exc}); "
                "decoding with the eager static step instead (the same tokens, slower)",
                CaptureFallbackWarning,
                stacklevel=2,
            )

    def clear(self) -> None:
        """Drop every bucket's cache and graph (their memory goes back to the allocator)."""
        self._static.clear()

    def _static_for(self, lm: LoadedModel, key: StaticKey, batch: DecodeBatch) -> StaticDecode:
        if key in self._static:
            self._static.move_to_end(key)
            return self._static[key]
        while len(self._static) >= self.keep:
            self._static.popitem(last=False)
            if lm.device.type == "cuda":
                torch.cuda.empty_cache()
        graphs = lm.device.type == "cuda" if self.graphs is None else self.graphs
        static = StaticDecode(lm, key, batch, graphs, self.capture, self._capture_failed)
        self._static[key] = static
        return static

    def kernels_for(self, lm: LoadedModel) -> DecodeKernels:
        return self.kernels or (FUSED if lm.device.type == "cuda" else NATIVE)

    @contextmanager
    def decoder(self, lm: LoadedModel, batch: DecodeBatch) -> Iterator[Decoder]:
        cap = static_capacity(lm, int(batch.input_ids.shape[1]), batch.steps)
        kernels = self.kernels_for(lm)
        if cap is None:  # the reference decoder, host checks every EOS_EVERY steps
            with ReferencePolicy().decoder(lm, batch) as reference, decode_kernels(lm, kernels):
                yield reference
            return
        layers = tuple(lm.check_layer(i) for i in layer_tuple(batch.layer))
        layer = layers[0] if isinstance(batch.layer, int) else layers
        key = StaticKey(
            id(lm.model), row_bucket(batch.n_rows), cap, batch.steps,
            layer, batch.mode, batch.sampling,
        )  # fmt: skip
        static = self._static_for(lm, key, batch)
        static.load(batch)
        handles = [lm.layer(i).register_forward_hook(h) for i, h in static.hooks.items()]
        try:
            with single_product(lm.model), decode_kernels(lm, kernels):
                yield static
        finally:
            for handle in handles:
                handle.remove()
