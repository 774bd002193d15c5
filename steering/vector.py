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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from steering.activations import LayerOutput, layer_output_tensor
from steering.models import LoadedModel

Mode = Literal["additive", "projection"]
MODES: tuple[str, ...] = ("additive", "projection")


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

    def _on(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cast is None or self._cast[0].device != hidden.device:
            d = self.directions.to(device=hidden.device, dtype=hidden.dtype)
            c = self.coefficients.to(device=hidden.device, dtype=hidden.dtype)
            self._cast = (d, c)
        return self._cast

    def edit(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.inactive:
            return hidden
        d, c = self._on(hidden)
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
    """A unit direction at a layer, with the scale that turns a strength into residual units."""

    direction: torch.Tensor
    layer: int
    alpha: float = 1.0
    beta: float = 0.2
    mode: Mode = "additive"
    source: str = "classifier"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        norm = float(self.direction.norm())
        if not abs(norm - 1.0) < 1e-3:
            raise ValueError(f"a steering direction must be unit-norm, got norm {norm:.4f}")
        if self.mode not in MODES:
            raise ValueError(f"unknown steering mode {self.mode!r}; use one of {MODES}")

    @classmethod
    def from_direction(cls, direction: torch.Tensor, layer: int, **kwargs: Any) -> SteeringVector:
        direction = direction.detach().float().cpu()
        return cls(direction=direction / direction.norm(), layer=layer, **kwargs)

    def coefficients(self, strengths: Sequence[float] | torch.Tensor | float) -> torch.Tensor:
        s = torch.as_tensor(strengths, dtype=torch.float32).reshape(-1)
        return s * (self.beta * self.alpha) if self.mode == "additive" else s

    @contextmanager
    def apply(
        self, lm: LoadedModel, strength: float | Sequence[float] | torch.Tensor = 1.0
    ) -> Iterator[RowSteering]:
        """Steer ``lm`` inside the block; a sequence gives one strength per batch row."""
        with steer_rows(
            lm, self.layer, self.direction, self.coefficients(strength), self.mode
        ) as h:
            yield h


def stack_coefficients(
    vectors: Sequence[SteeringVector], strengths: Sequence[float]
) -> torch.Tensor:
    """Per-row coefficients for rows that each use their own vector and strength."""
    return torch.cat([v.coefficients(s) for v, s in zip(vectors, strengths, strict=True)])
