"""Output-side scores of a steering direction: what it does to the next-token distribution.

Two cheap predictors of steering that need no generation (published work finds
output-side scores predict steering better than detection accuracy: Arad et al. 2025):

* :func:`logit_lens_gain`: the logit lens of the steered residual. At fixed residual
  positions h (neutral text at the steering layer), the final norm and the unembedding
  read h + c·v and h; the score is the mean over the concept's tokens of
  log p(token | h + c·v) − log p(token | h), per position. It skips the layers after
  the steering layer, so it says what the direction *writes* toward the vocabulary.
* :func:`next_token_kl`: the whole model, one step: the KL divergence of the steered
  from the unsteered next-token distribution after each prompt, steering at every
  position with coefficient c (how far the direction moves the output at all); with
  ``exclude`` (a concept's own tokens), the KL of what it does to the rest of the
  vocabulary (:func:`kl_without`), a dose that leaves the outcome's own tokens out.

Both run on the model's device and dtype, in chunks that bound the [rows, vocabulary]
logits they hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import torch
from torch import nn

from steering.activations import _layers_hidden
from steering.generation import left_padded
from steering.models import LoadedModel
from steering.vector import steer_rows

LOGITS_BUDGET = 1 << 26  # logits held at once (256 MiB in fp32)


def final_norm(lm: LoadedModel) -> nn.Module:
    """The norm between the last decoder layer and the output head (the text model's
    ``norm`` beside its ``layers``, however the model nests them)."""
    for module in lm.model.modules():
        if getattr(module, "layers", None) is lm.layers and hasattr(module, "norm"):
            return cast(nn.Module, module.norm)
    raise ValueError(f"cannot find the final norm of {type(lm.model).__name__}")


def lens_logprobs(lm: LoadedModel, residuals: torch.Tensor) -> torch.Tensor:
    """log p over the vocabulary read off residuals [..., hidden] by the final norm and
    the unembedding (with the model's final logit soft-capping, if any), fp32."""
    head = lm.model.get_output_embeddings()
    normed = final_norm(lm)(residuals.to(device=lm.device, dtype=lm.dtype))
    logits = (normed @ head.weight.T).float()
    cap = getattr(lm.text_config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return torch.log_softmax(logits, dim=-1)


def concept_token_ids(lm: LoadedModel, words: Sequence[str]) -> list[int]:
    """The first token of each word as it starts a word in running text (" word", then
    " Word"), deduplicated in that order, the unknown token left out: the tokens whose
    log-probability the lens reads (a name whose first piece is unknown by its first
    known one)."""
    tok = lm.tokenizer
    unknown = getattr(tok, "unk_token_id", None)
    ids: list[int] = []
    for word in words:
        word = word.replace("_", " ").strip()
        for form in dict.fromkeys((word, word[:1].upper() + word[1:])):  # ordered, unique
            pieces = tok(" " + form, add_special_tokens=False)["input_ids"]
            known = [p for p in pieces if p != unknown]
            # a multi-word name whose first word is unknown (a word-level vocabulary)
            # is read by its first known piece
            if known and known[0] not in ids:
                ids.append(int(known[0]))
    if not ids:
        raise ValueError(f"no tokens for {list(words)!r}")
    return ids


@torch.inference_mode()
def logit_lens_gain(
    lm: LoadedModel,
    residuals: torch.Tensor,
    directions: torch.Tensor,
    coefficients: torch.Tensor,
    token_ids: Sequence[Sequence[int]],
    budget: int = LOGITS_BUDGET,
) -> np.ndarray:
    """Per direction and position: mean over its tokens of log p(h + c·v) − log p(h).

    ``residuals`` [positions, hidden]; ``directions`` [n, hidden] (unit);
    ``coefficients`` [n] (c = s·β·α); ``token_ids[i]`` the tokens of direction i's
    concept. Returns [n, positions].
    """
    residuals = residuals.to(device=lm.device, dtype=torch.float32)
    n, p = directions.shape[0], residuals.shape[0]
    base = lens_logprobs(lm, residuals)  # [positions, vocab]
    out = np.empty((n, p))
    per_chunk = max(1, budget // (p * base.shape[-1]))
    dirs = directions.to(device=lm.device, dtype=torch.float32)
    coefs = coefficients.to(device=lm.device, dtype=torch.float32)
    for start in range(0, n, per_chunk):
        stop = min(n, start + per_chunk)
        steered = residuals[None] + coefs[start:stop, None, None] * dirs[start:stop, None, :]
        logp = lens_logprobs(lm, steered)  # [chunk, positions, vocab]
        for i in range(start, stop):
            ids = torch.as_tensor(list(token_ids[i]), device=lm.device)
            gain = logp[i - start][:, ids] - base[:, ids]
            out[i] = gain.mean(dim=-1).double().cpu().numpy()
    return out


@torch.inference_mode()
def last_token_residuals(lm: LoadedModel, texts: Sequence[str], layer: int) -> torch.Tensor:
    """The residual at ``layer`` at each text's last token: [texts, hidden], fp32 (the
    positions the logit lens reads)."""
    hidden, mask = _layers_hidden(lm, list(texts), [layer])
    last = (mask * torch.arange(mask.shape[1], device=mask.device)).argmax(dim=-1)
    return hidden[layer][torch.arange(len(texts), device=mask.device), last].cpu()


def _last_logprobs(
    lm: LoadedModel, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor
) -> torch.Tensor:
    out = lm.model(
        input_ids=ids.to(lm.device),
        attention_mask=attn.to(lm.device),
        position_ids=pos.to(lm.device),
        logits_to_keep=1,
    ).logits[:, -1, :]
    return torch.log_softmax(out.float(), dim=-1)


def kl_without(logp: torch.Tensor, ref: torch.Tensor, exclude: Sequence[int] = ()) -> torch.Tensor:
    """Per row of log-probabilities [..., vocabulary]: KL(p ‖ q) of ``logp`` from ``ref``,
    both restricted to the vocabulary without the token ids ``exclude`` and renormalised
    there; with nothing excluded, the plain KL.

    Why: a direction's next-token KL counts the mass it moves onto its concept's own
    tokens, and that mass is part of the steering outcome (the likelihood of on-concept
    text, the logit-lens gain). A dose matched on the plain KL is then partly matched on
    the outcome; left out, the KL measures only how far the direction moves the rest of
    the distribution. Raising only the excluded tokens' logits leaves it at 0, since the
    ratios among the other tokens are unchanged."""
    if len(exclude):
        keep = torch.ones(logp.shape[-1], dtype=torch.bool, device=logp.device)
        keep[torch.as_tensor(list(exclude), dtype=torch.long, device=logp.device)] = False
        if not keep.any():
            raise ValueError("the excluded tokens are the whole vocabulary")
        logp, ref = logp[..., keep], ref[..., keep]
        logp = logp - torch.logsumexp(logp, dim=-1, keepdim=True)
        ref = ref - torch.logsumexp(ref, dim=-1, keepdim=True)
    return (logp.exp() * (logp - ref)).sum(dim=-1)


@torch.inference_mode()
def next_token_kl(
    lm: LoadedModel,
    prompts: Sequence[str],
    layer: int,
    directions: torch.Tensor,
    coefficients: torch.Tensor,
    batch_size: int = 64,
    budget: int = LOGITS_BUDGET,
    exclude: Sequence[int] = (),
) -> np.ndarray:
    """Per direction and prompt: KL(p_steered ‖ p_unsteered) of the next token after the
    prompt, steering h + c·v at every position of ``layer`` (additive). [n, prompts].
    ``exclude``: token ids left out of both distributions, which are renormalised over
    the rest before the KL (:func:`kl_without`; a concept's :func:`concept_token_ids`,
    so the dose does not count the mass moved onto the concept's own tokens)."""
    tok = lm.tokenizer
    ids, attn, pos, _ = left_padded(
        [torch.tensor(tok(p)["input_ids"]) for p in prompts], tok.pad_token_id
    )
    base = _last_logprobs(lm, ids, attn, pos)  # [prompts, vocab]
    n, k = directions.shape[0], len(prompts)
    rows = max(1, min(batch_size, budget // base.shape[-1]))
    pairs = [(d, q) for d in range(n) for q in range(k)]
    out = np.empty(n * k)
    for start in range(0, len(pairs), rows):
        chunk = pairs[start : start + rows]
        d_index = torch.tensor([d for d, _ in chunk])
        q_index = torch.tensor([q for _, q in chunk])
        with steer_rows(lm, layer, directions[d_index], coefficients[d_index], "additive"):
            logp = _last_logprobs(lm, ids[q_index], attn[q_index], pos[q_index])
        kl = kl_without(logp, base[q_index.to(base.device)], exclude)
        out[start : start + len(chunk)] = kl.double().cpu().numpy()
    return out.reshape(n, k)
