"""Providers' stated limits across a fleet: a member one process learnt is over budget, all skip.

A provider's rate-limit headers reach the process that made the call; its siblings would each
have to be told by a 429 of their own. So a process that marks a member over budget until a
reset (its remaining requests reached 0, a 429 asked to wait, or its tokens ran out)
publishes the mark on the fleet's channel, and every process adopts it as the message arrives:
a publish in the background, nothing on any request's path. Marks travel as seconds from now,
not as times, so hosts' clocks need not agree. A mark lost while the store was unreachable is
only a missed early warning: the member's next answer (or 429) marks it again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final

from redis.asyncio import Redis

from asgi_router.fleet.link import Link

__all__ = ["FleetRateLimits", "Marked"]

#: What a mark's message starts with (the fleet's breaker messages never do).
_TAG: Final = "rate_limit"

#: Adopt a mark: ``(member, seconds its requests are blocked, tokens left, seconds they are)``.
Marked = Callable[[str, float, int, float], None]


class FleetRateLimits:
    """Publishes this process's marks and hands the fleet's to ``adopt``."""

    __slots__ = ("_channel", "_link", "adopt")

    def __init__(self, link: Link, channel: str) -> None:
        self._link = link
        self._channel = channel
        #: Where the fleet's marks go (the router's rate-limit table sets it).
        self.adopt: Marked | None = None

    def publish(self, key: str, requests_for: float, tokens: int, tokens_for: float) -> None:
        message = json.dumps([_TAG, key, round(requests_for, 3), tokens, round(tokens_for, 3)])

        async def send(client: Redis) -> None:
            await client.publish(self._channel, message)

        self._link.spawn(send)

    def heard(self, data: bytes) -> bool:
        """A message on the fleet's channel: adopt it if it is a mark; whether it was one."""
        if not data.startswith(b'["' + _TAG.encode()):
            return False
        try:
            _, key, requests_for, tokens, tokens_for = json.loads(data)
            if self.adopt is not None:
                self.adopt(str(key), float(requests_for), int(tokens), float(tokens_for))
        except (ValueError, TypeError):
            pass  # garbage: ignored (the member's next answer marks it again)
        return True
