"""Each configured guardrail as a check object: what it finds, and what its action makes of it.

A check is given the texts (and what it may need besides: the prompt's token estimate, the
schema the request asked for, who asked) and answers a :class:`Verdict`: ``pass``, ``mask`` (with
the texts masked), ``block``, ``flag`` or ``fail_over``. The built-in kinds find spans (``pii``,
``secrets``, ``deny``) or judge the whole (``max_input_tokens``, ``json_schema``); a ``callable``
asks the operator's function, sync ones in a worker thread. A check that raises is not caught
here: the runner turns it into ``guardrail_error``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from asgi_router.config.guardrail_settings import GuardrailAction, GuardrailSettings
from asgi_router.guardrails.deny_list import DenyList
from asgi_router.guardrails.guardrail_api import (
    Allow,
    Block,
    Flag,
    GuardrailFunction,
    GuardrailRequest,
    Mask,
)
from asgi_router.guardrails.pii import find_pii
from asgi_router.guardrails.schema_subset import violation
from asgi_router.guardrails.secret_shapes import find_secrets

__all__ = ["Asked", "Check", "GuardrailOutcome", "Verdict", "build_check"]

#: What a check's run came to (the metric's ``outcome`` label).
GuardrailOutcome: TypeAlias = Literal["pass", "block", "mask", "flag", "fail_over"]
Stage: TypeAlias = Literal["input", "output"]
Spans: TypeAlias = Callable[[str], Iterator[tuple[int, int, str]]]


@dataclass(frozen=True, slots=True)
class Asked:
    """What a check is asked about besides the texts."""

    stage: Stage
    caller: str | None
    route: str
    model: str
    #: The prompt's estimated tokens, computed on first use (input only).
    tokens: Callable[[], int] | None = None
    #: The JSON schema the request asked its answer to follow (output only; ``None``: none).
    schema: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: GuardrailOutcome
    #: The masked texts (``mask`` only).
    texts: tuple[str, ...] | None = None
    #: Why it blocked, for the log (never sent to the client).
    why: str = ""


PASS = Verdict("pass")


class CheckFailed(Exception):
    """A check could not give a verdict (it raised, or its answer was malformed)."""


def _matched(action: GuardrailAction, why: str) -> Verdict:
    return Verdict("block" if action == "block" else "fail_over" if action == "fail_over" else "flag", why=why)


def _masked(text: str, spans: list[tuple[int, int, str]]) -> str:
    """``text`` with each span replaced by its label; overlapping spans merged, the first's label kept."""
    spans.sort()
    out: list[str] = []
    at = 0
    for start, end, label in spans:
        if start < at:  # overlaps the previous one: extend it
            continue
        out.append(text[at:start])
        out.append(label)
        at = end
    out.append(text[at:])
    return "".join(out)


class Check(ABC):
    """One named guardrail: its stages and action; :meth:`run` judges texts."""

    __slots__ = ("action", "kind", "name", "stages")

    def __init__(self, name: str, settings: GuardrailSettings) -> None:
        self.name = name
        self.kind = settings.kind
        self.action: GuardrailAction = settings.action
        self.stages: frozenset[Stage] = (
            frozenset(("input", "output")) if settings.stage == "both" else frozenset((settings.stage,))
        )

    @abstractmethod
    async def run(self, texts: tuple[str, ...], asked: Asked) -> Verdict:
        """The verdict on ``texts`` (what the request asked for in ``asked``)."""


class SpanCheck(Check):
    """``pii``, ``secrets``, ``deny``: spans found in the texts."""

    __slots__ = ("_find",)

    def __init__(self, name: str, settings: GuardrailSettings, find: Spans) -> None:
        super().__init__(name, settings)
        self._find = find

    async def run(self, texts: tuple[str, ...], asked: Asked) -> Verdict:
        find, masking = self._find, self.action == "mask"
        masked: list[str] | None = None
        for at, text in enumerate(texts):
            spans = list(find(text))
            if not spans:
                continue
            if not masking:
                return _matched(self.action, f"{spans[0][2]} in text {at}")
            if masked is None:
                masked = list(texts)
            masked[at] = _masked(text, spans)
        return PASS if masked is None else Verdict("mask", tuple(masked))


class TokenCheck(Check):
    """``max_input_tokens``: the prompt's estimated size against a cap."""

    __slots__ = ("_limit",)

    def __init__(self, name: str, settings: GuardrailSettings) -> None:
        super().__init__(name, settings)
        assert settings.limit is not None  # refused at load otherwise
        self._limit = settings.limit

    async def run(self, texts: tuple[str, ...], asked: Asked) -> Verdict:
        tokens = asked.tokens() if asked.tokens is not None else 0
        if tokens > self._limit:
            return _matched(self.action, f"about {tokens} prompt tokens, over {self._limit}")
        return PASS


class SchemaCheck(Check):
    """``json_schema``: an answer that must parse and follow the schema its request asked for."""

    __slots__ = ()

    async def run(self, texts: tuple[str, ...], asked: Asked) -> Verdict:
        schema = asked.schema
        if schema is None or not texts:
            return PASS
        try:
            value = json.loads(texts[0])
        except ValueError:
            return _matched(self.action, "the answer is not JSON")
        found = violation(value, schema)
        return PASS if found is None else _matched(self.action, f"the answer breaks its schema: {found}")


class CallableCheck(Check):
    """``callable``: the operator's own function decides."""

    __slots__ = ("_async", "_function")

    def __init__(self, name: str, settings: GuardrailSettings, function: GuardrailFunction) -> None:
        super().__init__(name, settings)
        self._function = function
        self._async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__)

    async def run(self, texts: tuple[str, ...], asked: Asked) -> Verdict:
        request = GuardrailRequest(texts, asked.stage, asked.caller, asked.route, asked.model)
        if self._async:
            result = await self._function(request)  # type: ignore[misc]
        else:
            result = await asyncio.to_thread(self._function, request)
            if inspect.isawaitable(result):
                result = await result
        if isinstance(result, Allow):
            return PASS
        if isinstance(result, Flag):
            return Verdict("flag")
        if isinstance(result, Block):
            return Verdict("fail_over" if self.action == "fail_over" else "block", why=result.reason)
        if isinstance(result, Mask):
            masked = tuple(result.texts)
            if len(masked) != len(texts) or not all(isinstance(text, str) for text in masked):
                raise CheckFailed(f"Mask returned {len(masked)} texts for {len(texts)}")
            return Verdict("mask", masked) if masked != texts else PASS
        raise CheckFailed(f"returned {type(result).__name__}, not Allow, Mask, Block or Flag")


def build_check(name: str, settings: GuardrailSettings, function: GuardrailFunction | None) -> Check:
    """The check a ``[guardrails.<name>]`` table (and, for a callable, its function) configures."""
    kind = settings.kind
    if kind == "pii":
        entities = tuple(dict.fromkeys(settings.entities))
        return SpanCheck(name, settings, lambda text: find_pii(text, entities))
    if kind == "secrets":
        return SpanCheck(name, settings, find_secrets)
    if kind == "deny":
        return SpanCheck(name, settings, DenyList(settings.terms, settings.patterns).find)
    if kind == "max_input_tokens":
        return TokenCheck(name, settings)
    if kind == "json_schema":
        return SchemaCheck(name, settings)
    assert function is not None
    return CallableCheck(name, settings, function)
