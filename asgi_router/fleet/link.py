"""The router's one connection to the shared store, and the circuit that keeps Redis optional.

Redis is never a single point of failure, so every call to it goes through :class:`Link`:

* **Short timeouts.** A call made on a request's path (a rotate group's counter) gives up after
  :data:`REQUEST_TIMEOUT` and the request uses the process's own counter; background calls give
  up after :data:`BACKGROUND_TIMEOUT`. The client never retries by itself: the circuit decides.
* **A circuit, not a retry per request.** A failure (refused, reset, an answer that does not
  parse, a background call timed out, or :data:`SLOW_CALLS` request-path calls in a row timed
  out: one late answer on a busy event loop is not yet an outage) marks the store *down*: from
  then on nobody asks it, every process
  serves from its own view, and one line is logged (not one per request). A background task
  per event loop reconnects with jittered backoff (:data:`MIN_BACKOFF` doubling up to
  :data:`MAX_BACKOFF`); once it has subscribed again it resynchronises (``on_up``), marks the
  store *up* and says so in one more line.
* **Freshness by pub/sub.** The same task listens to the fleet's channel and hands each message
  to ``on_message``: a breaker that opens in one process holds in the others as soon as the
  message arrives, one network hop, inside the 250 ms the docs promise. A message
  lost while the subscription was down is made good by the resynchronisation.
* **One client per running event loop**, as for the upstream client
  (:class:`~asgi_router.transports.loop_clients.LoopClients`): made on that loop's first use
  (a request, lifespan or not), closed by :meth:`aclose` or when the loop ends.

The URL may hold a password: only :func:`masked` forms of it are ever logged.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar, cast
from urllib.parse import parse_qs, unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from asgi_router.observability.events import logger
from asgi_router.transports.loop_clients import LoopClients

__all__ = ["BACKGROUND_TIMEOUT", "MAX_BACKOFF", "MIN_BACKOFF", "REQUEST_TIMEOUT", "SLOW_CALLS", "Link", "masked"]

T = TypeVar("T")

#: The longest a request waits on Redis (a rotate group's counter) before using its own.
REQUEST_TIMEOUT: Final = 0.05
#: Request-path calls timed out in a row that mark the store down.
SLOW_CALLS: Final = 3
#: The longest a background call (a breaker write, a budget slice) may take.
BACKGROUND_TIMEOUT: Final = 1.0
#: Reconnection backoff: the first wait, and the cap it doubles up to.
MIN_BACKOFF: Final = 0.1
MAX_BACKOFF: Final = 2.0
#: How often the listener looks up from the channel (to notice a failure elsewhere, to stop).
_POLL: Final = 0.25


def masked(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: the only form that is logged."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def _client(url: str) -> tuple[Redis, Sentinel | None]:
    """A client for ``url`` that never retries on its own and fails fast (and the Sentinel it
    asks for the primary, whose own connections are closed with it)."""
    options: dict[str, Any] = {
        "socket_timeout": BACKGROUND_TIMEOUT,
        "socket_connect_timeout": BACKGROUND_TIMEOUT,
        "retry": Retry(NoBackoff(), 0),
    }
    if not url.lower().startswith("redis+sentinel://"):
        return Redis.from_url(url, **options), None
    # redis+sentinel://[user:password@]host:port[,host:port...]/primary-name[/db]
    parts = urlsplit(url)
    hosts = []
    for address in parts.netloc.rpartition("@")[2].split(","):
        host, _, port = address.rpartition(":") if ":" in address else (address, "", "26379")
        hosts.append((host, int(port or 26379)))
    path = [segment for segment in parts.path.split("/") if segment]
    if not path:
        raise ValueError("state_url: redis+sentinel:// needs the primary's name as its path")
    db = int(path[1]) if len(path) > 1 else int(parse_qs(parts.query).get("db", ["0"])[0])
    credentials = {
        "username": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
    }
    # The URL's user and password are the primary's; the sentinels are asked without them.
    sentinel = Sentinel(hosts, sentinel_kwargs=dict(options), **options)  # type: ignore[no-untyped-call]
    primary = sentinel.master_for(path[0], redis_class=Redis, db=db, **credentials)  # type: ignore[arg-type]
    return cast(Redis, primary), sentinel


class _Connection:
    """One event loop's client and its listener task."""

    __slots__ = ("client", "closed", "listener", "sentinel")

    def __init__(self, client: Redis, sentinel: Sentinel | None) -> None:
        self.client = client
        self.sentinel = sentinel
        self.listener: asyncio.Task[None] | None = None
        self.closed = False


class Link:
    """The store's connection, up or down (see the module docstring)."""

    def __init__(
        self,
        url: str,
        channel: str,
        *,
        on_up: Callable[[Redis], Awaitable[None]],
        on_message: Callable[[bytes], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.shown = masked(url)
        self._url = url
        self._channel = channel
        self._on_up = on_up
        self._on_message = on_message
        self._clock = clock
        self._connections: LoopClients[_Connection] = LoopClients(self._open, self._close, self._is_closed)
        #: Whether the store answers: every call is skipped while it does not.
        self.up = False
        self._said_down = False
        self._backoff = MIN_BACKOFF
        #: Request-path calls timed out in a row.
        self._slow = 0
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- connections, one per loop ------------------------------------------------------------

    def _open(self) -> _Connection:
        connection = _Connection(*_client(self._url))
        connection.listener = asyncio.get_running_loop().create_task(
            self._listen(connection), name="asgi_router shared-state listener"
        )
        return connection

    async def _close(self, connection: _Connection) -> None:
        connection.closed = True
        if connection.listener is not None:
            # Cancelled, and told by ``closed``: a cancellation that lands as redis-py's own read
            # times out can be absorbed there (``asyncio.timeout`` on Python 3.11), and the
            # listener then stops at its next look up from the channel instead. Waited for with
            # a bound either way: closing never hangs on it.
            connection.listener.cancel()
            await asyncio.wait([connection.listener], timeout=BACKGROUND_TIMEOUT)
        await connection.client.aclose()
        if connection.sentinel is not None:
            for sentinel in connection.sentinel.sentinels:
                await sentinel.aclose()

    @staticmethod
    def _is_closed(connection: _Connection) -> bool:
        return connection.closed

    def start(self) -> None:
        """Connect on the running loop now (lifespan startup) rather than on its first request."""
        self._connections.current()

    def ensure(self) -> None:
        """The running loop has its connection (and listener): made on its first request, so that
        a router without lifespan (a mounted sub-app) shares too. Cheap once made."""
        self._connections.current()

    async def aclose(self) -> None:
        """Close the running loop's connection (lifespan shutdown)."""
        for task in list(self._tasks):
            task.cancel()
        await self._connections.aclose()

    # --- calls --------------------------------------------------------------------------------

    async def call(self, op: Callable[[Redis], Awaitable[T]], *, request: bool = False) -> T | None:
        """``op``'s answer, or ``None`` when the store is down or fails now (then it is down).

        ``request``: the call is on a request's path, bounded by :data:`REQUEST_TIMEOUT`.
        """
        connection = self._connections.current()
        if not self.up:
            return None
        client = connection.client
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT if request else BACKGROUND_TIMEOUT):
                answer = await op(client)
        except asyncio.CancelledError:
            raise
        except TimeoutError as exc:
            self._slow += 1
            if not request or self._slow >= SLOW_CALLS:
                self._went_down(exc)
            return None
        except Exception as exc:  # refused, reset, garbage: the store is down for now
            self._went_down(exc)
            return None
        self._slow = 0
        return answer

    def spawn(self, op: Callable[[Redis], Awaitable[None]]) -> None:
        """Run ``op`` in the background (a breaker write, a budget slice); never awaited by a request."""
        self._connections.current()
        if not self.up:
            return
        task = asyncio.get_running_loop().create_task(self.call(op))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the listener: pub/sub, health, reconnection --------------------------------------------

    async def _listen(self, connection: _Connection) -> None:
        while not connection.closed:
            try:
                await self._subscribed(connection)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._went_down(exc)
            if not connection.closed:
                await asyncio.sleep(self._backoff * (0.5 + random.random() / 2))
                self._backoff = min(self._backoff * 2, MAX_BACKOFF)

    async def _subscribed(self, connection: _Connection) -> None:
        """Subscribe, resynchronise, then pass messages on until a failure (anyone's), the
        connection's close, or cancel."""
        client = connection.client
        pubsub = client.pubsub()
        try:
            async with asyncio.timeout(BACKGROUND_TIMEOUT):
                await pubsub.subscribe(self._channel)
            self.up = True  # the resync's own calls go through call()
            await self._on_up(client)
            if not self.up:
                return  # the resync failed: back off and try again
            self._backoff = MIN_BACKOFF
            if self._said_down:
                self._said_down = False
                logger.info("shared state at %s is reachable again; sharing resumes", self.shown)
            while self.up and not connection.closed:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=_POLL)
                if message is not None and message.get("type") == "message":
                    self._on_message(message["data"])
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    def _went_down(self, exc: BaseException) -> None:
        self.up = False
        self._slow = 0
        if not self._said_down:
            self._said_down = True
            logger.warning(
                "shared state at %s is unreachable (%s); each process serves from its own view "
                "and reconnects in the background",
                self.shown,
                type(exc).__name__,
            )
