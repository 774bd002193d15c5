"""EasySteer's in-memory vector handed to ``steer_eval.evaluate(vectors=...)``: mapped to
the per-layer vectors the GGUF it exports would give (no model, no MLflow run here)."""

from __future__ import annotations

from dataclasses import dataclass

import gguf
import numpy as np
import pytest

from steer_eval import ArgumentError
from steer_eval.vectors import Concepts, entries, stage
from steering.vector_files import read_control_vector

KNOWN = Concepts("f", ("herb.n.01", "person.n.01"), ("herb", "person"))


@dataclass
class StatisticalControlVector:
    """EasySteer's ``StatisticalControlVector`` (ZJU-REAL/EasySteer at 312c6d8,
    ``easysteer/steer/utils.py``), what its extractors return
    (``easysteer/steer/base_extractor.py``: ``directions[layer] =
    direction.astype(np.float32)`` per captured layer, keyed by the true decoder-layer id,
    or a positional index for nested-list input): its fields, and its ``export_gguf``."""

    method: str
    directions: dict[int, np.ndarray]
    metadata: dict | None = None
    # "Only echoed into the gguf model_hint field for repeng compatibility"
    model_type: str = "unknown"

    def export_gguf(self, path) -> None:
        """As EasySteer writes it: the ``controlvector`` architecture, ``model_hint``,
        ``method``, ``layer_count``, one ``direction.<layer>`` tensor per layer."""
        arch = "controlvector"
        writer = gguf.GGUFWriter(str(path), arch)
        writer.add_string(f"{arch}.model_hint", self.model_type)
        writer.add_string(f"{arch}.method", self.method)
        writer.add_uint32(f"{arch}.layer_count", len(self.directions))
        for layer in self.directions:
            writer.add_tensor(f"direction.{layer}", self.directions[layer])
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()


def extracted(seed: int, layers=(1, 2, 3), model_type: str = "unknown"):
    """What ``extract_diffmean_control_vector(..., normalize=True)`` returns: unit float32
    directions per layer (numpy integer keys, as a CaptureResult's ids may be)."""
    rng = np.random.default_rng(seed)
    directions = {}
    for n in layers:
        v = rng.normal(size=64)
        directions[np.int64(n)] = (v / np.linalg.norm(v)).astype(np.float32)
    return StatisticalControlVector("diffmean", directions, {"normalize": True}, model_type)


def test_an_easysteer_vector_is_written_as_its_own_export_reads(tmp_path):
    cv = extracted(1)
    (item,) = entries({"herb": cv}, None, KNOWN)
    assert item.synset == "herb.n.01" and item.hint == ""  # "unknown" names no model
    folder = stage([item], tmp_path)
    written = read_control_vector(folder / "herb.n.01.gguf")
    cv.export_gguf(tmp_path / "exported.gguf")
    exported = read_control_vector(tmp_path / "exported.gguf")
    assert exported.model_hint == "unknown" and written.model_hint == ""
    assert written.directions.keys() == exported.directions.keys() == {1, 2, 3}
    for n, v in exported.directions.items():
        assert np.array_equal(written.directions[n], v)
        assert np.array_equal(v, cv.directions[np.int64(n)])
    # the same layers as arrays per layer: the same folder, so the same run
    plain = {int(n): v for n, v in cv.directions.items()}
    assert stage(entries({"herb": plain}, None, KNOWN), tmp_path) == folder


def test_an_easysteer_vector_keeps_a_model_type_it_was_given(tmp_path):
    (item,) = entries(extracted(2, model_type="qwen2.5"), ["person.n.01"], KNOWN)
    assert item.synset == "person.n.01" and item.hint == "qwen2.5"


def test_an_easysteer_vector_with_block_0_says_how_to_leave_it_out():
    cv = extracted(3, layers=(0, 1, 2))
    with pytest.raises(
        ArgumentError, match=r"layer 0 cannot be written .*\(EasySteer's extractors key every layer"
    ):
        entries({"herb": cv}, None, KNOWN)
