"""The judge rubric in MLflow's prompt registry, versioned.

The registered template is the chat prompt the API judges are sent (system + user,
from :func:`judges.prompt.render_api_prompt`) with ``{{concept}}`` and ``{{text}}`` in
place of the rated text. A rubric whose rendered template is already registered reuses
that version; a changed wording registers a new one, tagged with the rubric's own
``version`` (which is also in every judge's cache key). Each judge score's feedback then
names the prompt version it was made with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from experiments import tracking

if TYPE_CHECKING:
    from mlflow.entities.model_registry import PromptVersion

    from judges.base import Rubric

PROMPT_NAME = "steer-eval-judge-rubric"


@dataclass(frozen=True)
class RubricPrompt:
    """A registered rubric: its registry URI (``prompts:/name/version``) and its version."""

    uri: str
    rubric_version: str


def rubric_template(rubric: Rubric) -> list[dict[str, Any]]:
    """The chat messages an API judge receives, with placeholders for concept and text."""
    from judges.base import RatingRequest
    from judges.prompt import render_api_prompt

    rendered = render_api_prompt(
        RatingRequest(
            text="{{text}}", concept="{{concept}}", rubric=rubric, instruction="{{prompt}}"
        )
    )
    return [
        {"role": "system", "content": rendered.system},
        {"role": "user", "content": rendered.user},
    ]


def _versions(name: str) -> list[PromptVersion]:
    c = tracking.client()
    out, token = [], None
    try:
        while True:
            page = c.search_prompt_versions(name, max_results=100, page_token=token)
            out.extend(page)
            token = page.token
            if not token:
                return out
    except Exception:  # MLflow raises its own error for a prompt that does not exist
        return out


def register_rubric(rubric: Rubric) -> RubricPrompt:
    """The registry version holding this rubric's template, registering it if new."""
    template = rubric_template(rubric)
    for version in _versions(PROMPT_NAME):
        if version.template == template:
            return RubricPrompt(version.uri, rubric.version)
    registered = tracking.client().register_prompt(
        PROMPT_NAME,
        template,
        commit_message=f"judge rubric {rubric.version}",
        tags={
            "rubric_version": rubric.version,
            "fluency_axis": str(rubric.fluency).lower(),
            "used_by": "steer-eval panel (API judges; the llama judge scores the same question)",
        },
    )
    return RubricPrompt(registered.uri, rubric.version)
