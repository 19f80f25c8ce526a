"""What an operator's own check is given and what it answers: the public guardrail types.

``ModelRouter(guardrails={"name": fn})`` (or ``kind = "callable"`` in TOML) names a function
``fn(req: GuardrailRequest) -> GuardrailResult``, sync (run in a worker thread, so it cannot
stall the event loop) or async. It sees the texts the router would check (the prompt's, or the
answer's) and answers with one of four results: :class:`Allow`, :class:`Mask` (the same texts,
same length and order, with what must not pass replaced), :class:`Block` or :class:`Flag`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

__all__ = ["Allow", "Block", "Flag", "GuardrailFunction", "GuardrailRequest", "GuardrailResult", "Mask"]


@dataclass(frozen=True, slots=True)
class GuardrailRequest:
    """What a check is asked about: the texts, at which stage, for whom, on which route and model."""

    #: The texts checked, in the request's (or answer's) order: system, messages, tool results,
    #: tool-call arguments (``input``); the answer's content and tool-call arguments (``output``).
    texts: tuple[str, ...]
    stage: Literal["input", "output"]
    #: The caller the app authenticated (``None``: callers are not named).
    caller: str | None
    #: The URL path asked for, below ``root_path``.
    route: str
    #: The ``model`` the client asked for (input), or the ``provider/model-id`` that answered (output).
    model: str


@dataclass(frozen=True, slots=True)
class Allow:
    """Nothing found: the texts go on as they are."""


@dataclass(frozen=True, slots=True)
class Mask:
    """Replace the texts by these (same length and order as ``GuardrailRequest.texts``)."""

    texts: tuple[str, ...] | list[str]


@dataclass(frozen=True, slots=True)
class Block:
    """Refuse: the client gets 400 ``guardrail_blocked``; ``reason`` is logged, never sent."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Flag:
    """Let it through, but say so in the request's record, log line and metrics."""


GuardrailResult: TypeAlias = Allow | Mask | Block | Flag
#: An operator's check: sync (run in a worker thread) or async.
GuardrailFunction: TypeAlias = Callable[[GuardrailRequest], GuardrailResult | Awaitable[GuardrailResult]]
