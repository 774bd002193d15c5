"""OpenAI Chat Completions judge (via the `openai` SDK), for OpenAI or any compatible server.

`base_url` points it at vLLM, a llama.cpp server, Ollama, etc. The key comes only from
$OPENAI_API_KEY; with a custom `base_url` and no key set, a placeholder is sent, because
local servers usually need none (a server that does will answer 401, a clear error).
`estimate_only=True` builds it for a dry run without its key (`judges.api`).
"""

from __future__ import annotations

from typing import Any

from judges.api import APIJudge, CallResult, classify_sdk_error
from judges.base import Rubric
from judges.prompt import RenderedPrompt
from judges.registry import judge_provider

DEFAULT_MODEL = "gpt-4o-mini"
KEY_ENV = "OPENAI_API_KEY"
NO_KEY_PLACEHOLDER = "no-key-required"


def _import_sdk() -> Any:
    import openai

    return openai


class OpenAIJudge(APIJudge):
    """A Chat Completions judge.

    `json_mode=True` sends response_format={"type": "json_object"} (OpenAI, vLLM,
    llama.cpp and Ollama all support it), which keeps answers parseable; the parse is still
    strict. Temperature defaults to 0 for repeatability.
    """

    provider = "openai"
    key_env = KEY_ENV

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        name: str | None = None,
        base_url: str | None = None,
        json_mode: bool = True,
        temperature: float | None = 0.0,
        seed: int | None = 0,
        **options: Any,
    ) -> None:
        if "api_key" in options:
            raise TypeError(f"API keys are read from ${KEY_ENV} only; do not pass api_key.")
        super().__init__(
            name or f"openai/{model}", model, temperature=temperature, base_url=base_url, **options
        )
        self.json_mode = json_mode
        self.seed = seed
        self._connect(_import_sdk, "OpenAI", NO_KEY_PLACEHOLDER if base_url is not None else None)

    def decoding_params(self, rubric: Rubric) -> dict[str, Any]:
        return {**super().decoding_params(rubric), "json_mode": self.json_mode, "seed": self.seed}

    def describe(self) -> dict[str, str]:
        return {**super().describe(), "json_mode": str(self.json_mode), "seed": str(self.seed)}

    def _call(self, prompt: RenderedPrompt, rubric: Rubric) -> CallResult:
        kwargs: dict[str, Any] = {}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.seed is not None:
            kwargs["seed"] = self.seed
        if self.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": prompt.system},
                    {"role": "user", "content": prompt.user},
                ],
                max_tokens=self.max_tokens_for(rubric),
                **kwargs,
            )
        except Exception as exc:
            raise classify_sdk_error(self._sdk, exc, self) from None
        choices = getattr(response, "choices", None) or []
        text = (choices[0].message.content or "") if choices else ""
        return self._result(response, text, "prompt_tokens", "completion_tokens")


@judge_provider("openai")
def openai_judge(model: str = "", **options: Any) -> OpenAIJudge:
    """ "openai/<model>"; a bare "openai" means DEFAULT_MODEL."""
    return OpenAIJudge(model or DEFAULT_MODEL, **options)
