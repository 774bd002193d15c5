"""Fixtures shared by the steering tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def directions():
    """Two unit directions in the tiny models' 64-dimensional residual stream."""
    d = torch.randn(2, 64, generator=torch.Generator().manual_seed(5))
    return d / d.norm(dim=1, keepdim=True)
