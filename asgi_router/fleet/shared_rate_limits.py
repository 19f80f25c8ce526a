"""Providers' stated limits across a fleet: a member one process learnt is over budget, all skip.

A provider's rate-limit headers reach the process that made the call; its siblings would each
have to be told by a 429 of their own. So a process that marks a member over budget until a
reset (its remaining requests reached 0, a 429 asked to wait, or its tokens ran out)
publishes the mark on the fleet's channel, and every process adopts it as the message arrives:
a publish in the background, nothing on any request's path. Marks travel as seconds from now,
not as times, so hosts' clocks need not agree. A mark lost while the store was unreachable is
only a missed early warning: the member's next answer (or 429) marks it again.

A message is believed whole or not at all: one whose figures are not finite, are negative, or
name a reset longer than the router's ``max_rate_limit_reset`` is ignored (a wrong or hostile
publisher must not bench a member everywhere, nor put ``Infinity`` in a status page's JSON).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Final

from redis.asyncio import Redis

from asgi_router.fleet.link import Link, read_message

__all__ = ["FleetRateLimits", "Marked"]

#: What a mark's message starts with (the fleet's breaker messages never do).
_TAG: Final = "rate_limit"

#: Adopt a mark: ``(member, seconds its requests are blocked, tokens left, seconds they are)``.
Marked = Callable[[str, float, int, float], None]


class FleetRateLimits:
    """Publishes this process's marks and hands the fleet's to ``adopt``."""

    __slots__ = ("_channel", "_link", "adopt", "longest")

    def __init__(self, link: Link, channel: str) -> None:
        self._link = link
        self._channel = channel
        #: Where the fleet's marks go (the router's rate-limit table sets it).
        self.adopt: Marked | None = None
        #: The longest reset a mark may name (``max_rate_limit_reset``, set with :attr:`adopt`).
        self.longest = math.inf

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
            _, key, requests_for, tokens, tokens_for = read_message(data)
            seconds, left = (float(requests_for), float(tokens_for)), int(tokens)
            if not all(0 <= value <= self.longest for value in seconds) or left < 0:
                return True  # not believed: ignored whole
            if self.adopt is not None:
                self.adopt(str(key), seconds[0], left, seconds[1])
        except (ValueError, TypeError):
            pass  # garbage: ignored (the member's next answer marks it again)
        return True
