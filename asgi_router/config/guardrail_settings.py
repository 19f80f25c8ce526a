"""A router's named guardrails, as configured: ``[guardrails.<name>]`` tables.

Each table names a kind (a built-in check, or ``callable``: the operator's own function), the
stage it runs at (the prompt, the answer, or both) and what a match does (block, mask, flag, or
on an answer fail over to the next candidate). Combinations that cannot mean anything are refused
at load, naming the table: ``json_schema`` on input (there is no schema to check a prompt
against), ``max_input_tokens`` on output or with ``mask`` (a size cannot be masked), ``fail_over``
on input (the prompt is the same for every candidate). A ``deny`` pattern is compiled at load: a
bad one is refused, naming it. What acts on these settings lives in ``asgi_router/guardrails``.
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import Field, PositiveInt, model_validator

from asgi_router.config.strict_settings import StrictSettings

__all__ = ["PII_ENTITIES", "GuardrailAction", "GuardrailKind", "GuardrailSettings", "GuardrailStage", "PiiEntity"]

GuardrailKind = Literal["pii", "secrets", "deny", "max_input_tokens", "json_schema", "callable"]
GuardrailStage = Literal["input", "output", "both"]
GuardrailAction = Literal["block", "mask", "flag", "fail_over"]
PiiEntity = Literal["email", "phone", "payment_card", "iban", "us_ssn", "ip_address"]

#: Every entity the ``pii`` kind finds (its default: all of them).
PII_ENTITIES: tuple[PiiEntity, ...] = ("email", "phone", "payment_card", "iban", "us_ssn", "ip_address")


class GuardrailSettings(StrictSettings):
    """One named check: its kind, when it runs, what a match does, and the kind's own keys."""

    kind: GuardrailKind = Field(
        description="`pii`, `secrets`, `deny`, `max_input_tokens`, `json_schema` (built in) or `callable` "
        "(your own function)."
    )
    stage: GuardrailStage = Field(
        default="input",
        description="What it checks: `input` (the prompt, before any upstream sees it), `output` (the answer, "
        "before the client sees it) or `both`.",
    )
    action: GuardrailAction = Field(
        default="block",
        description="What a match does: `block` (400 `guardrail_blocked`), `mask` (the matched spans replaced by "
        "a label such as `[EMAIL]`), `flag` (recorded only) or `fail_over` (output only: the attempt fails "
        "with `guardrail_failed` and the next candidate is asked).",
    )
    entities: list[PiiEntity] = Field(
        default_factory=lambda: list(PII_ENTITIES),
        description="`pii`: the entities to find (default: all of `email`, `phone`, `payment_card`, `iban`, "
        "`us_ssn`, `ip_address`).",
    )
    terms: list[str] = Field(
        default_factory=list, description="`deny`: words or phrases, matched whole and case-insensitively."
    )
    patterns: list[str] = Field(
        default_factory=list, description="`deny`: regular expressions (Python syntax), compiled at load."
    )
    limit: PositiveInt | None = Field(
        default=None, description="`max_input_tokens`: the largest estimated prompt, in tokens (required)."
    )
    function: str | None = Field(
        default=None,
        description="`callable`: `package.module:function`, called with a `GuardrailRequest` (unset: the "
        "function passed as `ModelRouter(guardrails={name: fn})`).",
    )

    @model_validator(mode="after")
    def _check_combination(self) -> Self:
        kind, stage, action = self.kind, self.stage, self.action
        if kind == "json_schema" and stage != "output":
            raise ValueError('kind "json_schema" checks answers only: stage must be "output"')
        if kind == "json_schema" and action == "mask":
            raise ValueError('kind "json_schema" cannot mask: an invalid answer has no span to replace')
        if kind == "max_input_tokens":
            if stage != "input":
                raise ValueError('kind "max_input_tokens" checks prompts only: stage must be "input"')
            if action == "mask":
                raise ValueError('kind "max_input_tokens" cannot mask: a size has no span to replace')
            if self.limit is None:
                raise ValueError('kind "max_input_tokens" needs a limit')
        if action == "fail_over" and stage != "output":
            raise ValueError('action "fail_over" applies to answers only: stage must be "output"')
        if kind == "deny" and not self.terms and not self.patterns:
            raise ValueError('kind "deny" needs terms or patterns')
        for at, pattern in enumerate(self.patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"patterns[{at}] is not a valid regular expression ({exc})") from None
        if kind == "callable" and self.function is not None and ":" not in self.function:
            raise ValueError('function must be "package.module:function"')
        return self
