"""A platform per device, chosen once by the loader (issue 37, item 3).

No GPU here: a CUDA host is faked through torch's own queries (``is_available`` and
the bf16 ones), which is all the choice reads; the model, the embedder and the executor
are the real ones.
"""

from __future__ import annotations

import pytest
import torch

from experiments.config import load_config
from steering.models import ModelSpec, load_model, pick_dtype
from steering.platform import CpuPlatform, CudaPlatform, DtypeError, Platform, platform_for
from steering.policies import policy_for


@pytest.fixture
def gpu_host(monkeypatch):
    """torch says a CUDA card is there (without bf16: compute capability 7.5)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))


def test_each_device_type_gets_its_platform():
    assert isinstance(platform_for("cpu"), CpuPlatform)
    assert isinstance(platform_for("cuda:1"), CudaPlatform)
    other = platform_for("meta")
    assert type(other) is Platform and other.name == "reference"
    assert [platform_for(d).decode_policy for d in ("cpu", "cuda", "mps")] == [
        "cpu",
        "cuda",
        "reference",
    ]
    assert platform_for("cpu").free_bytes() is None and not platform_for("cpu").on_card


def test_the_loader_keeps_the_platform_and_the_policy_follows_it(tiny_model_dir):
    lm = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    assert isinstance(lm.platform, CpuPlatform) and lm.platform.device == lm.device
    assert policy_for(lm).name == "cpu"
    assert lm.platform.torch_threads == torch.get_num_threads()


def test_a_card_without_bf16_refuses_it_and_defaults_to_fp16(gpu_host):
    card = torch.device("cuda")
    assert pick_dtype(card) is torch.float16
    with pytest.raises(DtypeError, match=r"Tesla T4, compute capability 7\.5\) has no bf16"):
        pick_dtype(card, "bfloat16")
    assert pick_dtype(torch.device("cpu"), "bfloat16") is torch.bfloat16  # the CPU emulates it


def test_device_cpu_on_a_gpu_host_keeps_everything_on_the_cpu(gpu_host, tiny_model_dir, tmp_path):
    """The language model and the embedder both on the CPU (the embedder used to take
    its own default, the card)."""
    from experiments.kernel.lifecycle import open_run

    config = load_config(
        "configs/phase5.yaml",
        [
            f"model={tiny_model_dir}",
            "device=cpu",
            "dtype=float32",
            "concepts.limit=2",
            f"tracking.results_dir={tmp_path}",
        ],
    )
    assert config.model_spec == ModelSpec(str(tiny_model_dir), "cpu", "float32", "auto")
    with open_run(config) as session:
        assert session.lm.device.type == "cpu" and isinstance(session.lm.platform, CpuPlatform)
        assert session.embedder.device.type == "cpu"


def test_the_embedders_device_comes_from_the_platform_of_the_configs_device(gpu_host):
    """``metrics.embedder`` has no device of its own any more: ``auto`` on a GPU host is
    the card for the model and the embedder alike, ``cpu`` is the CPU for both, and a
    rescore (no model loaded) asks the config's device the same way."""
    from experiments.kernel.lifecycle import embedder_device
    from metrics.embedder import device_for, load_embedder

    assert device_for("auto") == "cuda"
    assert device_for("cuda:1") == "cuda:1"
    assert device_for("cpu") == "cpu"
    config = load_config("configs/phase5.yaml", ["device=cpu"])
    assert embedder_device(config, None) == "cpu"
    assert embedder_device(load_config("configs/phase5.yaml"), None) == "cuda"
    with pytest.raises(TypeError):
        load_embedder("embedded")  # no default device: the caller names the platform's
    assert load_embedder("embedded", device_for("cpu")).device.type == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA host: the card is auto's")
def test_the_embedder_follows_the_cpu_on_a_cpu_host():
    from metrics.embedder import device_for

    assert device_for("auto") == "cpu"
