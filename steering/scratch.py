"""Tensors a loop reuses across its steps, instead of allocating them at every step."""

from __future__ import annotations

import torch


class Scratch:
    """Tensors a loop reuses across its steps, by name, instead of allocating each step.

    A fresh [rows, 262,144] tensor is paged in and zeroed by the kernel when first written:
    on a 2-core EPYC a softmax of 90 rows took 35 ms into a fresh tensor and 9 ms into a
    reused one, and gathering 45 rows 20 ms against 3 ms. A name's tensor grows when a
    step needs more rows; a step gets a view of its first rows.
    """

    def __init__(self) -> None:
        self._tensors: dict[str, torch.Tensor] = {}

    def take(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """A tensor of ``shape`` with ``like``'s dtype and device, by name (its contents
        are whatever the previous step left)."""
        rows, cols = shape[0], tuple(shape[1:])
        buf = self._tensors.get(name)
        if (
            buf is None
            or buf.shape[0] < rows
            or tuple(buf.shape[1:]) != cols
            or buf.dtype != like.dtype
            or buf.device != like.device
        ):
            buf = torch.empty((rows, *cols), dtype=like.dtype, device=like.device)
            self._tensors[name] = buf
        return buf[:rows]
