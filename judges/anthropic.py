"""Anthropic Messages API judge (via the `anthropic` SDK, imported only when one is built).

`estimate_only=True` builds it for a dry run without its key (`judges.api`).
"""

from __future__ import annotations

from typing import Any

from judges.api import APIJudge, CallResult, classify_sdk_error
from judges.base import Rubric
from judges.prompt import RenderedPrompt
from judges.registry import judge_provider

DEFAULT_MODEL = "claude-sonnet-4-5"
KEY_ENV = "ANTHROPIC_API_KEY"


def _import_sdk() -> Any:
    import anthropic

    return anthropic


class AnthropicJudge(APIJudge):
    """Claude as a judge. The key comes only from $ANTHROPIC_API_KEY.

    `temperature` defaults to None (not sent): recent SDKs dropped it from the typed
    signature and some newer models reject it; when set it is passed in the request body.
    """

    provider = "anthropic"
    key_env = KEY_ENV

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        name: str | None = None,
        base_url: str | None = None,
        **options: Any,
    ) -> None:
        if "api_key" in options:
            raise TypeError(f"API keys are read from ${KEY_ENV} only; do not pass api_key.")
        super().__init__(name or f"anthropic/{model}", model, base_url=base_url, **options)
        self._connect(_import_sdk, "Anthropic")

    def _call(self, prompt: RenderedPrompt, rubric: Rubric) -> CallResult:
        extra: dict[str, Any] = {}
        if self.temperature is not None:
            extra["extra_body"] = {"temperature": self.temperature}
        try:
            response = self._client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens_for(rubric),
                system=prompt.system,
                messages=[{"role": "user", "content": prompt.user}],
                **extra,
            )
        except Exception as exc:
            raise classify_sdk_error(self._sdk, exc, self) from None
        text = "".join(
            getattr(block, "text", "")
            for block in (response.content or [])
            if getattr(block, "type", None) == "text"
        )
        return self._result(response, text, "input_tokens", "output_tokens")


@judge_provider("anthropic")
def anthropic_judge(model: str = "", **options: Any) -> AnthropicJudge:
    """ "anthropic/<model>"; a bare "anthropic" means DEFAULT_MODEL."""
    return AnthropicJudge(model or DEFAULT_MODEL, **options)
