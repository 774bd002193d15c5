"""experiments.bench.llamacpp.llama: the layer mapping between our hook and llama.cpp's cvec."""

from __future__ import annotations

import pytest

from experiments.bench.llamacpp.llama import llama_layer_index


def test_llama_layer_mapping():
    assert llama_layer_index(9) == 9
    with pytest.raises(ValueError, match="layer 0"):
        llama_layer_index(0)
