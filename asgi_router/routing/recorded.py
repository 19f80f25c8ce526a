"""Request facts as a file keeps them: what a request looked like to the rules, and back again.

``asgi-router replay`` re-resolves recorded requests with a new configuration to show what would
route differently. It cannot have the requests themselves (their messages are the users' words)
and needs none of them: the rules read only a few facts (``rules.py``). A :class:`FactRecorder`
takes those facts from a live request: the token estimate, images, tools, stream, reasoning,
and the values of only those headers and ``metadata`` keys that some rule names. Credential
headers (``authorization``, ``x-api-key``, cookies: what is never forwarded upstream) are never
kept, even when a rule names one. :func:`recorded_facts` turns such a record back into
:class:`~asgi_router.routing.facts.RequestFacts` that answer the rules' questions as the request
did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from asgi_router.config.rules_settings import RuleSettings
from asgi_router.core.header_names import never_forwarded
from asgi_router.routing.facts import RequestFacts

__all__ = ["FactRecorder", "recorded_facts", "rule_inputs"]


def rule_inputs(rules: Sequence[RuleSettings]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The header names (lowercase, credentials left out) and ``metadata`` keys the rules read."""
    headers = sorted({name for rule in rules for name in rule.headers if not never_forwarded(name.encode("latin-1"))})
    metadata = sorted({key for rule in rules for key in rule.metadata})
    return tuple(headers), tuple(metadata)


class FactRecorder:
    """Takes the facts the configured rules read from a live request, as plain JSON-able data."""

    __slots__ = ("_headers", "_metadata")

    def __init__(self, rules: Sequence[RuleSettings]) -> None:
        self._headers, self._metadata = rule_inputs(rules)

    def __call__(self, facts: RequestFacts) -> dict[str, object]:
        headers = {name: value for name in self._headers if (value := facts.header(name.encode("latin-1"))) is not None}
        metadata = {key: value for key in self._metadata if (value := facts.metadata(key)) is not None}
        return {
            "prompt_tokens": facts.prompt_tokens,
            "images": facts.images,
            "tools": facts.tools,
            "stream": facts.stream,
            "reasoning": facts.reasoning,
            "headers": headers,
            "metadata": metadata,
        }


def _strings(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(key): item for key, item in value.items() if isinstance(item, str)}


def recorded_facts(recorded: Mapping[str, Any]) -> RequestFacts:
    """Facts that answer every rule condition as the recorded request did (absent ones: no)."""
    payload: dict[str, Any] = {}
    if recorded.get("stream") is True:
        payload["stream"] = True
    if recorded.get("tools") is True:
        payload["tools"] = [{"type": "function"}]
    if recorded.get("reasoning") is True:
        payload["reasoning_effort"] = "recorded"
    metadata = _strings(recorded.get("metadata"))
    if metadata:
        payload["metadata"] = metadata
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in _strings(recorded.get("headers")).items()
    ]
    tokens = recorded.get("prompt_tokens")
    prompt_tokens = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else 0
    images = 1 if recorded.get("images") is True else 0
    return RequestFacts.known(payload, headers, prompt_tokens, images)
