"""Which transport a router uses: the one ``RouterSettings.transport`` names.

aiohttp is the default (``docs/performance.md`` compares the two); an injected ``http_client``
(an ``httpx2.AsyncClient``) always means the httpx transport.
"""

from __future__ import annotations

from typing import Literal

import httpx2

from asgi_router.config.provider_settings import PoolSettings
from asgi_router.transports.aiohttp_transport import AiohttpTransport
from asgi_router.transports.httpx_transport import HttpxTransport
from asgi_router.transports.transport import Transport

__all__ = ["make_transport"]


def make_transport(
    kind: Literal["aiohttp", "httpx"], pool: PoolSettings, http_client: httpx2.AsyncClient | None = None
) -> Transport:
    """The transport for ``kind``; an injected ``http_client`` always means the httpx one."""
    if http_client is not None or kind == "httpx":
        return HttpxTransport(pool, http_client)

    return AiohttpTransport(pool)
