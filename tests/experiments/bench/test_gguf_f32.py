"""experiments.bench.llamacpp.gguf_f32: a quantized GGUF dequantized to fp32, metadata kept."""

from __future__ import annotations

import os

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter, LlamaFileType
from gguf.quants import dequantize, quantize

from experiments.bench.llamacpp.gguf_f32 import f32_gguf, f32_path


def _quantized(path) -> dict[str, np.ndarray]:
    """A small GGUF like the embedded one: a Q8_0 matrix, an F32 norm, tokenizer arrays."""
    rng = np.random.default_rng(0)
    weights = {"token_embd.weight": rng.standard_normal((8, 64), dtype=np.float32)}
    norm = rng.standard_normal(64, dtype=np.float32)
    w = GGUFWriter(path, arch="gemma3")
    w.add_block_count(1)
    w.add_file_type(LlamaFileType.MOSTLY_Q8_0)
    w.add_token_list(["<pad>", "<bos>", "hello"])
    w.add_token_scores([0.0, -1.0, -2.5])
    w.add_string("general.name", "tiny")
    q = quantize(weights["token_embd.weight"], GGMLQuantizationType.Q8_0)
    w.add_tensor("token_embd.weight", q, raw_dtype=GGMLQuantizationType.Q8_0)
    w.add_tensor("output_norm.weight", norm)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {
        "token_embd.weight": dequantize(q, GGMLQuantizationType.Q8_0),
        "output_norm.weight": norm,
    }


def test_every_tensor_is_fp32_with_the_dequantized_values(tmp_path):
    src = tmp_path / "tiny-q8_0.gguf"
    expected = _quantized(src)
    dst = f32_gguf(src)
    assert dst == f32_path(src) and dst.name == "tiny-q8_0-dequantized-f32.gguf"
    reader = GGUFReader(dst)
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) == set(expected)
    for name, values in expected.items():
        assert tensors[name].tensor_type == GGMLQuantizationType.F32
        assert np.array_equal(np.asarray(tensors[name].data).reshape(values.shape), values)
    fields = reader.fields
    assert fields["general.architecture"].contents() == "gemma3"
    assert fields["general.file_type"].contents() == int(LlamaFileType.ALL_F32)
    assert fields["general.name"].contents() == "tiny"
    assert fields["tokenizer.ggml.tokens"].contents() == ["<pad>", "<bos>", "hello"]
    assert fields["tokenizer.ggml.scores"].contents() == pytest.approx([0.0, -1.0, -2.5])
    assert not list(tmp_path.glob("*.tmp*"))  # written atomically


def test_the_copy_is_made_once_and_remade_when_the_source_changes(tmp_path):
    src = tmp_path / "tiny-q8_0.gguf"
    _quantized(src)
    dst = f32_gguf(src)
    first = dst.stat().st_mtime_ns
    assert f32_gguf(src).stat().st_mtime_ns == first  # reused
    later = dst.stat().st_mtime + 10
    os.utime(src, (later, later))
    assert f32_gguf(src).stat().st_mtime_ns != first  # the source is newer: remade
