"""The semantic cache's one router-internal call: a text's embedding, from the configured ref.

``cache.semantic.embed`` names an embeddings model as any ``model`` is named (``provider/model-id``
or ``group/<id>``); it is resolved by the router's own resolver, and its candidates are asked in
plan order through the router's transport (the same pool, the same provider keys), each
``POST {base_url}/embeddings`` with ``{"model": <model-id>, "input": <text>}``, OpenAI's shape.
The first that answers a vector gives it. Each call is bounded by its provider's ``first_byte``
timeout and its answer by :data:`MAX_EMBEDDING_BYTES`; an embedding that cannot be had (no
candidate answered, a refusal, garbage) is ``None``, which the cache takes as a miss: the
request goes on to its upstream as if the group had no semantic lookup.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from typing import Final

from asgi_router.observability.events import logger
from asgi_router.routing.plan import Plan, Resolver
from asgi_router.transports.provider import ProviderRuntime
from asgi_router.transports.transport import Transport, close_response, read_bounded

__all__ = ["MAX_EMBEDDING_BYTES", "Embedder"]

#: The largest embeddings answer read: a few thousand floats as JSON text, with room to spare.
MAX_EMBEDDING_BYTES: Final = 4 * 1024 * 1024


class Embedder:
    """Embeds texts through a router's resolver, providers and transport (module docstring)."""

    __slots__ = ("_base_urls", "_providers", "_resolver", "_transport")

    def __init__(
        self,
        resolver: Resolver,
        providers: Mapping[str, ProviderRuntime],
        base_urls: Mapping[str, str],
        transport: Transport,
    ) -> None:
        self._resolver = resolver
        self._providers = providers
        #: Each OpenAI-protocol provider's ``base_url`` (the others have no embeddings route).
        self._base_urls = base_urls
        self._transport = transport

    async def __call__(self, ref: str, text: str, request_id: str) -> list[float] | None:
        """``text``'s embedding from ``ref``'s candidates, or ``None`` when none gave one."""
        plan = self._resolver.resolve_string(ref)
        if not isinstance(plan, Plan):
            return None
        for candidate in plan.candidates:
            runtime = self._providers.get(candidate.provider)
            base = self._base_urls.get(candidate.provider)
            if runtime is None or base is None or not runtime.configured:
                continue
            payload = json.dumps({"model": candidate.model_id, "input": text}, ensure_ascii=False).encode()
            headers = {**runtime.headers, "content-type": "application/json", "x-request-id": request_id}
            try:
                async with asyncio.timeout(runtime.timeouts.first_byte):
                    vector = await self._ask(runtime, base + "/embeddings" + runtime.query, headers, payload)
            except Exception:  # refused, timed out, garbage: the next candidate, else a miss
                logger.debug("embedding through %s failed", candidate.key, exc_info=True)
                continue
            if vector is not None:
                return vector
        return None

    async def _ask(
        self, runtime: ProviderRuntime, url: str, headers: dict[str, str], payload: bytes
    ) -> list[float] | None:
        response = await self._transport.send(runtime, url, headers, payload)
        try:
            if response.status != 200:
                return None
            body = await read_bounded(response, MAX_EMBEDDING_BYTES)
        finally:
            closing = close_response(response)
            if closing is not None:
                await closing
        return _vector(body) if body is not None else None


def _vector(body: bytes) -> list[float] | None:
    """The first embedding of an OpenAI-shaped answer, when it is a non-empty list of finite
    numbers."""
    try:
        data = json.loads(body)
        vector = data["data"][0]["embedding"]
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    if not isinstance(vector, list) or not vector:
        return None
    if not all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in vector):
        return None
    return [float(x) for x in vector]
