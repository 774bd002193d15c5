"""What a device is to the suite, decided once: a :class:`Platform` per device type.

Like vLLM's ``current_platform``: the loader picks the platform of the model's device
(``platform_for``) and keeps it on the loaded model, and everything that used to ask
``device.type == "cuda"`` on its own asks the platform instead: the default dtype and
the dtypes the device can compute in, the decode policy, the free memory that batch
sizes come from, where the embedder runs and the torch thread count (which sets a
row's last bits on the CPU, so Ray actors take it from here). ``--device cpu`` on a GPU
host is then the CPU platform for everything, the embedder included. A new device is a
platform here plus a decode policy (steering/decode*.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from steering.registry import Registry


class DtypeError(ValueError):
    """A dtype the chosen device cannot compute in; the message names the ones it can."""


@dataclass(frozen=True)
class Platform:
    """The reference platform: any device without its own (``mps``, ``meta``, ...).

    Decodes with the reference policy, fp32 by default, no memory probe (the callers'
    CPU-tuned batch sizes), the embedder beside the model."""

    device: torch.device
    name: ClassVar[str] = "reference"
    decode_policy: ClassVar[str] = "reference"

    def default_dtype(self) -> torch.dtype:
        return torch.float32

    def check_dtype(self, dtype: torch.dtype) -> None:
        """Raise :class:`DtypeError` for a dtype this device cannot compute in."""

    def free_bytes(self) -> int | None:
        """Free memory for batch sizing; None where the callers' defaults hold."""
        return None

    @property
    def embedder_device(self) -> str:
        return str(self.device)

    @property
    def torch_threads(self) -> int:
        """Torch's intra-op threads in this process: on the CPU a row's last bits depend
        on it, so a Ray actor must compute with the driver's count."""
        return torch.get_num_threads()

    @property
    def on_card(self) -> bool:
        return False


@dataclass(frozen=True)
class CpuPlatform(Platform):
    """The CPU: fp32 (bf16 emulated where the CPU lacks it, with a warning), the tuned
    CPU decode policy, the suite's constant batch sizes."""

    name: ClassVar[str] = "cpu"
    decode_policy: ClassVar[str] = "cpu"

    @property
    def embedder_device(self) -> str:
        return "cpu"


@dataclass(frozen=True)
class CudaPlatform(Platform):
    """A CUDA card: bf16 (fp16 on a card without it), the static-cache, graph-captured
    decode policy, batch sizes from the card's free memory."""

    name: ClassVar[str] = "cuda"
    decode_policy: ClassVar[str] = "cuda"

    def default_dtype(self) -> torch.dtype:
        bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        return torch.bfloat16 if bf16 else torch.float16  # fp16 on cards before Ampere

    def check_dtype(self, dtype: torch.dtype) -> None:
        if dtype != torch.bfloat16 or torch.cuda.is_bf16_supported(including_emulation=False):
            return
        name = torch.cuda.get_device_name(self.device)
        major, minor = torch.cuda.get_device_capability(self.device)
        raise DtypeError(
            f"dtype bfloat16: the card {self.device} ({name}, compute capability "
            f"{major}.{minor}) has no bf16; use --set dtype=float16 (or float32), or a card "
            "of compute capability 8.0 or newer"
        )

    def free_bytes(self) -> int | None:
        free, _total = torch.cuda.mem_get_info(self.device)
        return int(free)

    @property
    def on_card(self) -> bool:
        return True


PLATFORMS: Registry[type[Platform]] = Registry("platform")
PLATFORMS.register("cpu", CpuPlatform)
PLATFORMS.register("cuda", CudaPlatform)


def platform_for(device: torch.device | str) -> Platform:
    """The platform of ``device``: its own for ``cpu`` and ``cuda``, else the reference."""
    device = torch.device(device)
    kind: type[Platform] = PLATFORMS.get(device.type, Platform)
    return kind(device)
