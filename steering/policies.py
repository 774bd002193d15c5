"""The decode policies by name, and the one a loaded model uses (steering/decode.py)."""

from __future__ import annotations

from steering.decode import CpuPolicy, DecodePolicy, ReferencePolicy
from steering.decode_cuda import CudaPolicy
from steering.decode_kernels import DecodeKernels
from steering.models import LoadedModel
from steering.registry import Registry

POLICIES: Registry[type[DecodePolicy]] = Registry("decode policy")
POLICIES.register(ReferencePolicy.name, ReferencePolicy)
POLICIES.register(CpuPolicy.name, CpuPolicy)
POLICIES.register(CudaPolicy.name, CudaPolicy)


def make_policy(name: str) -> DecodePolicy:
    return POLICIES[name]()  # an unknown name: a ValueError naming the known ones


def policy_for(lm: LoadedModel) -> DecodePolicy:
    """The model's decode policy, made on first use and kept on the model (the CUDA
    policy's captured graphs and caches are per model)."""
    if not isinstance(lm.decoder_state, DecodePolicy):
        name = lm.decode_policy if lm.decode_policy != "auto" else lm.platform.decode_policy
        lm.decoder_state = make_policy(name)
    return lm.decoder_state


def kernels_of(lm: LoadedModel) -> DecodeKernels | None:
    """The kernels ``lm``'s decode policy runs (the CUDA policy's), or None for a policy
    that has no choice of kernels (the run's tag and the GPU bench's result)."""
    policy = policy_for(lm)
    return policy.kernels_for(lm) if isinstance(policy, CudaPolicy) else None


def decode_description(lm: LoadedModel) -> str:
    """How ``generate_batch`` decodes on ``lm``, in a few words for a run's tag: the
    policy's name and, for the CUDA policy, its kernels ("cuda: efficient attention,
    compiled norms")."""
    name, kernels = policy_for(lm).name, kernels_of(lm)
    return f"{name}: {kernels.describe()}" if kernels else name
