"""Steering vectors and the hook that applies them.

``SteeringVector.apply(lm, strength)`` is a context manager that always removes its
hook, even when the body raises. The hook edits the layer's output at every position,
so it acts on the prompt and on each token generated under the KV cache.

Modes:
- ``additive`` (default): h + s·β·α·v, with v the unit direction, α the layer's median
  per-token residual norm on neutral text and β a scale. Strength s then means the same
  fraction of the residual norm on any model.
- ``projection``: the original research's h + s·(h·v)·v. Positive s *amplifies* the
  component of h along v (and s = -1 removes it); it cannot tell v from -v for the
  sign of the component, which is why the original's "positive" steering suppressed.

Several layers at once (a repeng or EasySteer file applied as deployed): a vector may
carry one vector per steered layer (``per_layer``), each added at its layer times the
row's one coefficient, one hook per layer (:func:`steer_layers`), all removed on exit.
With ``coefficient`` set (``steering.scale: file``) that coefficient is s·k, repeng's
``set_control(vector, k)``: h_l += s·k·v_l with the file's own v_l.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import torch
from torch import nn

from steering.activations import LayerOutput, layer_output_tensor
from steering.models import LoadedModel

Mode = Literal["additive", "projection"]
MODES: tuple[str, ...] = ("additive", "projection")
# Where steering acts: one decoder layer (today's runs, directions ``[.., hidden]``) or
# several in ascending order (directions ``[.., len(layers), hidden]``, one per layer).
Layers: TypeAlias = int | tuple[int, ...]


def layer_tuple(layers: Layers) -> tuple[int, ...]:
    """The steered layers as a tuple (one layer or several)."""
    return (layers,) if isinstance(layers, int) else tuple(layers)


def layer_shape(layers: Layers) -> tuple[int, ...]:
    """The layer axis of a directions tensor: none for one layer, ``(len(layers),)``."""
    return () if isinstance(layers, int) else (len(layers),)


def lowest_layer(layers: Layers) -> int:
    """The first steered layer: below it (and at its output before the hook) a steered
    forward pass is the unsteered one (steering/suffix.py starts above it)."""
    return min(layer_tuple(layers))


class RowSteering:
    """A forward hook adding a per-row edit: row i gets its own direction and coefficient.

    ``directions`` is ``[rows, hidden]`` (or ``[hidden]``, shared by all rows) and
    ``coefficients`` ``[rows]``: in additive mode the coefficient is s·β·α (residual
    units), in projection mode it is s.
    """

    def __init__(self, directions: torch.Tensor, coefficients: torch.Tensor, mode: Mode) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown steering mode {mode!r}; use one of {MODES}")
        self.directions = directions if directions.dim() == 2 else directions.unsqueeze(0)
        self.coefficients = coefficients.reshape(-1)
        self.mode = mode
        self.inactive = bool((self.coefficients == 0).all())
        self._cast: tuple[torch.Tensor, torch.Tensor] | None = None

    def edit(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.inactive:
            return hidden
        if self._cast is None or self._cast[0].device != hidden.device:  # once per device
            d = self.directions.to(device=hidden.device, dtype=hidden.dtype)
            self._cast = (d, self.coefficients.to(device=hidden.device, dtype=hidden.dtype))
        d, c = self._cast
        rows = hidden.shape[0]
        if c.shape[0] not in (1, rows) or d.shape[0] not in (1, rows):
            raise ValueError(f"steering was set up for {c.shape[0]} rows but the batch has {rows}")
        d = d[:, None, :]
        c = c[:, None, None]
        if self.mode == "additive":
            return hidden + c * d
        return hidden + c * (hidden * d).sum(dim=-1, keepdim=True) * d

    def __call__(
        self, _module: nn.Module, _inputs: tuple[Any, ...], output: LayerOutput
    ) -> LayerOutput:
        if self.inactive:
            return output
        if isinstance(output, tuple):
            return (self.edit(output[0]), *output[1:])
        return self.edit(layer_output_tensor(output))


@contextmanager
def steer_rows(
    lm: LoadedModel, layer: int, directions: torch.Tensor, coefficients: torch.Tensor, mode: Mode
) -> Iterator[RowSteering]:
    """Install a :class:`RowSteering` hook on ``layer`` for the duration of the block."""
    hook = RowSteering(directions, coefficients, mode)
    handle = lm.layer(layer).register_forward_hook(hook)
    try:
        yield hook
    finally:
        handle.remove()


def layer_directions(directions: torch.Tensor, layers: Layers) -> dict[int, torch.Tensor]:
    """Each steered layer's directions: the tensor itself for one layer, else its
    ``[.., k, :]`` slice for the k-th layer (``[len(layers), hidden]`` shared by every row,
    or ``[rows, len(layers), hidden]``); views, so a buffer copied into stays seen."""
    if isinstance(layers, int):
        return {layers: directions}
    if directions.dim() < 2 or directions.shape[-2] != len(layers):
        raise ValueError(
            f"steering {len(layers)} layers needs directions [.., {len(layers)}, hidden], "
            f"got {tuple(directions.shape)}"
        )
    return {layer: directions[..., k, :] for k, layer in enumerate(layers)}


@contextmanager
def steer_layers(
    lm: LoadedModel,
    layers: Layers,
    directions: torch.Tensor,
    coefficients: torch.Tensor,
    mode: Mode,
) -> Iterator[dict[int, RowSteering]]:
    """:func:`steer_rows` on every layer of ``layers`` in one pass (one hook per layer,
    each row's coefficient shared by its layers), every hook removed on exit even when
    the block raises. One layer installs exactly the hook :func:`steer_rows` does."""
    with ExitStack() as stack:
        yield {
            layer: stack.enter_context(steer_rows(lm, layer, d, coefficients, mode))
            for layer, d in layer_directions(directions, layers).items()
        }


@dataclass(frozen=True)
class Direction:
    """A concept's unit direction under an id: the one direction type, before a layer and
    a scale make it a :class:`SteeringVector`. identify's every manipulated direction
    (``id`` its manipulation and level, ``facts`` what its draw used: the actual ρ, the
    other concept) and each arm the likelihood outcome scores (``id``: ``concept``,
    ``random:0``, ``null:other:herb.n.01``) is one. ``vector`` keeps the dtype it was built
    in (identify's are float64, so detection reads them exactly); ``dose`` multiplies the
    coefficient it is steered with (a direction steered at its own multiple of β)."""

    concept: str
    id: str
    vector: torch.Tensor  # unit, [hidden]
    dose: float = 1.0
    facts: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, concept: str, id: str, vector: Any, **kwargs: Any) -> Direction:
        """From a tensor or a numpy array (shared, not copied: the values stay bit for bit)."""
        return cls(concept, id, torch.as_tensor(vector), **kwargs)

    def array(self) -> Any:
        """The vector as a numpy array, in its own dtype (a view, not a copy)."""
        return self.vector.detach().cpu().numpy()


@dataclass(frozen=True)
class SteeringVector:
    """A unit direction at a layer, with the scale that turns a strength into residual units.

    ``per_layer`` (additive only): the vector each steered layer adds per unit of the
    coefficient, when that is not ``direction`` at ``layer`` alone (several layers, or a
    file's own norm); ``coefficient``: the coefficient of s = 1 when it is not β·α (a
    file's vectors at repeng's coefficient k, ``steering.scale: file``)."""

    direction: torch.Tensor
    layer: int
    alpha: float = 1.0
    beta: float = 0.2
    mode: Mode = "additive"
    source: str = "classifier"
    meta: dict[str, Any] = field(default_factory=dict)
    per_layer: dict[int, torch.Tensor] | None = None
    coefficient: float | None = None

    def __post_init__(self) -> None:
        norm = float(self.direction.norm())
        if not abs(norm - 1.0) < 1e-3:
            raise ValueError(f"a steering direction must be unit-norm, got norm {norm:.4f}")
        if self.mode not in MODES:
            raise ValueError(f"unknown steering mode {self.mode!r}; use one of {MODES}")
        if (self.per_layer is not None or self.coefficient is not None) and (
            self.mode != "additive"
        ):
            raise ValueError("several layers or a file's own scale steer additively only")
        if self.per_layer is not None and not self.per_layer:
            raise ValueError("per_layer needs at least one layer")

    @property
    def layers(self) -> Layers:
        """Where it steers: its layer, or its layers in ascending order."""
        if self.per_layer is None or set(self.per_layer) == {self.layer}:
            return self.layer
        return tuple(sorted(self.per_layer))

    def added(self) -> torch.Tensor:
        """What the hooks add per unit of coefficient: ``[hidden]`` for one layer,
        ``[len(layers), hidden]`` for several (in :attr:`layers`' order)."""
        if self.per_layer is None:
            return self.direction
        layers = self.layers
        if isinstance(layers, int):
            return self.per_layer[layers]
        return torch.stack([self.per_layer[layer] for layer in layers])

    @classmethod
    def from_direction(cls, direction: torch.Tensor, layer: int, **kwargs: Any) -> SteeringVector:
        direction = direction.detach().float().cpu()
        return cls(direction=direction / direction.norm(), layer=layer, **kwargs)

    def coefficients(self, strengths: Sequence[float] | torch.Tensor | float) -> torch.Tensor:
        s = torch.as_tensor(strengths, dtype=torch.float32).reshape(-1)
        if self.coefficient is not None:
            return s * self.coefficient
        return s * (self.beta * self.alpha) if self.mode == "additive" else s

    @contextmanager
    def apply(
        self, lm: LoadedModel, strength: float | Sequence[float] | torch.Tensor = 1.0
    ) -> Iterator[RowSteering]:
        """Steer ``lm`` inside the block; a sequence gives one strength per batch row.
        Yields the hook on :attr:`layer` (a vector of several layers hooks them all)."""
        with steer_layers(
            lm, self.layers, self.added(), self.coefficients(strength), self.mode
        ) as hooks:
            yield hooks[self.layer] if self.layer in hooks else next(iter(hooks.values()))
