"""The router's one connection to the shared store, and the circuit that keeps Redis optional.

Redis is never a single point of failure, so every call to it goes through :class:`Link`:

* **Short timeouts.** A call made on a request's path (a rotate group's counter) gives up after
  :data:`REQUEST_TIMEOUT` and the request uses the process's own counter; background calls give
  up after :data:`BACKGROUND_TIMEOUT`. The client never retries by itself: the circuit decides.
* **A circuit, not a retry per request.** A failure (refused, reset, an answer that does not
  parse, or :data:`SLOW_CALLS` calls in a row timed out with no answer from the store meanwhile:
  a late answer on a busy event loop, while the store answers other calls, is not an outage)
  marks the store *down*: from then on nobody asks it, every process
  serves from its own view, and one line is logged (not one per request). A background task
  per event loop reconnects with jittered backoff (:data:`MIN_BACKOFF` doubling up to
  :data:`MAX_BACKOFF`); once it has subscribed again it resynchronises (``on_up``), marks the
  store *up* and says so in one more line.
* **Freshness by pub/sub.** The same task listens to the fleet's channel and hands each message
  to ``on_message``: a breaker that opens in one process holds in the others as soon as the
  message arrives, one network hop, inside the 250 ms the docs promise. A message
  lost while the subscription was down is made good by the resynchronisation. A message is
  read with :func:`read_message`: one with a figure that is not finite is refused whole.
* **Bounded background work.** At most :data:`MAX_BACKGROUND` background calls run at once per
  event loop; the rest wait their turn in a queue of at most :data:`MAX_WAITING` (past it a
  write is dropped: the store's view is then a little behind, never wrong for a request, and
  the breaker's owner coalesces its writes so the queue holds one entry per breaker). A burst
  of a thousand failures thus never drains the connection pool, and a pool that is busy
  (``MaxConnectionsError``) skips that one call without marking the store down: only a store
  that does not answer is down.
* **One client per running event loop**, as for the upstream client
  (:class:`~asgi_router.transports.loop_clients.LoopClients`): made on that loop's first use
  (a request, lifespan or not), closed by :meth:`aclose` or when the loop ends.

The URL may hold a password: only its :func:`~asgi_router.core.store_url.mask_store_url` form is
ever logged.
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
import random
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, TypeVar, cast
from urllib.parse import parse_qs, unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import MaxConnectionsError

from asgi_router.core.store_url import mask_store_url
from asgi_router.observability.events import logger
from asgi_router.transports.loop_clients import LoopClients

__all__ = [
    "BACKGROUND_TIMEOUT",
    "LATE",
    "MAX_BACKGROUND",
    "MAX_BACKOFF",
    "MAX_WAITING",
    "MIN_BACKOFF",
    "REQUEST_TIMEOUT",
    "SLOW_CALLS",
    "Link",
    "usable_url",
    "read_message",
]

T = TypeVar("T")

#: The longest a request waits on Redis (a rotate group's counter) before using its own.
REQUEST_TIMEOUT: Final = 0.05
#: Calls timed out in a row (the store answering none meanwhile) that mark the store down.
SLOW_CALLS: Final = 3
#: Seconds after it was due that a timeout is noticed late: the event loop was busy (a burst of
#: requests), and the store is not blamed for it.
LATE: Final = 0.25
#: The longest a background call (a breaker write, a budget slice) may take.
BACKGROUND_TIMEOUT: Final = 1.0
#: Reconnection backoff: the first wait, and the cap it doubles up to.
MIN_BACKOFF: Final = 0.1
MAX_BACKOFF: Final = 2.0
#: Background calls (breaker writes, budget slices) running at once on one event loop.
MAX_BACKGROUND: Final = 8
#: Background calls waiting for their turn on one event loop; past it a new one is dropped.
MAX_WAITING: Final = 20_000
#: How often the listener looks up from the channel (to notice a failure elsewhere, to stop).
_POLL: Final = 0.25


def _not_finite(word: str) -> Any:
    raise ValueError(f"{word} is not a figure")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: JSON's way to write Infinity without the word
        raise ValueError(f"{text} is not a finite figure")
    return value


def read_message(data: bytes | str) -> Any:
    """A fleet message as JSON whose every figure is finite; ``ValueError`` otherwise (no
    ``Infinity`` or ``NaN`` reaches a breaker, a mark or a status page)."""
    return json.loads(data, parse_constant=_not_finite, parse_float=_finite)


def _sentinel_parts(url: str) -> tuple[list[tuple[str, int]], str, int, dict[str, str | None]]:
    """``redis+sentinel://[user:password@]host:port[,host:port...]/primary-name[/db]``: the
    sentinels, the primary's name, its database and credentials."""
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
    return hosts, path[0], db, credentials


def usable_url(url: str) -> bool:
    """Whether a client can be made for ``url`` (parsed only: nothing connects). The settings
    refuse a URL that does not parse; this guards settings built without validation, so that
    a bad URL costs the fleet's sharing, never the router's ability to serve."""
    try:
        if url.lower().startswith("redis+sentinel://"):
            _sentinel_parts(url)
        else:
            parse_url(url)
    except Exception:  # its message may quote the URL's password: never shown
        return False
    return True


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
    hosts, name, db, credentials = _sentinel_parts(url)
    # The URL's user and password are the primary's; the sentinels are asked without them.
    sentinel = Sentinel(hosts, sentinel_kwargs=dict(options), **options)  # type: ignore[no-untyped-call]
    primary = sentinel.master_for(name, redis_class=Redis, db=db, **credentials)  # type: ignore[arg-type]
    return cast(Redis, primary), sentinel


#: A background call: the operation, and what to tell its owner if it never ran.
_Job = tuple[Callable[[Redis], Awaitable[None]], Callable[[], None] | None]


class _Connection:
    """One event loop's client and its listener task."""

    __slots__ = ("client", "closed", "listener", "running", "sentinel", "waiting")

    def __init__(self, client: Redis, sentinel: Sentinel | None) -> None:
        self.client = client
        self.sentinel = sentinel
        self.listener: asyncio.Task[None] | None = None
        self.closed = False
        #: Background calls running now, and those waiting for their turn.
        self.running = 0
        self.waiting: collections.deque[_Job] = collections.deque()


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
        self.shown = mask_store_url(url)
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
        #: Calls timed out in a row, with no answer from the store meanwhile.
        self._slow = 0
        #: Answers the store gave: a call that timed out while others were answered met a busy
        #: event loop, not a store that is down.
        self._answers = 0
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
        for connection in self._connections.clients():
            connection.waiting.clear()  # nothing new starts while the running calls are cancelled
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
        answers = self._answers
        limit = REQUEST_TIMEOUT if request else BACKGROUND_TIMEOUT
        started = time.monotonic()
        try:
            async with asyncio.timeout(limit):
                answer = await op(client)
        except asyncio.CancelledError:
            raise
        except MaxConnectionsError:
            return None  # this process is busy, the store is not down: this one call is skipped
        except TimeoutError as exc:
            if self._answers != answers or time.monotonic() - started > limit + LATE:
                # The store answered other calls meanwhile, or the timeout itself ran late: this
                # event loop is busy (a burst of requests), which says nothing about the store.
                return None
            self._slow += 1
            if self._slow >= SLOW_CALLS:
                self._went_down(exc)
            return None
        except Exception as exc:  # refused, reset, garbage: the store is down for now
            self._went_down(exc)
            return None
        self._slow = 0
        self._answers += 1
        return answer

    def spawn(self, op: Callable[[Redis], Awaitable[None]], *, skipped: Callable[[], None] | None = None) -> bool:
        """Run ``op`` in the background (a breaker write, a budget slice); never awaited by a
        request. At most :data:`MAX_BACKGROUND` run at once. ``False`` when ``op`` will not run
        (the store is down, or :data:`MAX_WAITING` calls already wait); ``skipped`` is called if
        ``op`` was accepted but the store was down by its turn, so that its owner never waits
        for an answer that will not come."""
        connection = self._connections.current()
        if not self.up:
            return False
        if connection.running < MAX_BACKGROUND:
            self._run(connection, (op, skipped))
        elif len(connection.waiting) < MAX_WAITING:
            connection.waiting.append((op, skipped))
        else:
            return False
        return True

    def _run(self, connection: _Connection, job: _Job) -> None:
        connection.running += 1
        task = asyncio.get_running_loop().create_task(self._background(*job))
        self._tasks.add(task)
        task.add_done_callback(partial(self._ran, connection))

    async def _background(self, op: Callable[[Redis], Awaitable[None]], skipped: Callable[[], None] | None) -> None:
        ran = False

        async def run(client: Redis) -> None:
            nonlocal ran
            ran = True
            await op(client)

        await self.call(run)
        if not ran and skipped is not None:
            skipped()

    def _ran(self, connection: _Connection, task: asyncio.Task[Any]) -> None:
        """A background call ended: the next one waiting takes its place (down or not: a call
        made while the store is down returns at once, and its owner learns it did not run)."""
        self._tasks.discard(task)
        connection.running -= 1
        if connection.waiting and not connection.closed:
            self._run(connection, connection.waiting.popleft())

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
