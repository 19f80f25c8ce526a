"""When to ask the same candidate again, and after how long.

Full-jitter exponential backoff (AWS Architecture Blog, "Exponential Backoff and Jitter"):
retry *n* (0-based) waits a uniform random time in ``[0, min(cap, base * 2**n))``. Spreading
retries over the whole interval is what stops a crowd of clients that failed together from
retrying together. An upstream's own hint (:mod:`asgi_router.attempts.hints`) replaces the backoff;
a hint longer than ``max_retry_wait`` is not waited at all, and no wait may outrun the
request's deadline: a retry that would start too late is no retry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from asgi_router.config.resilience_settings import BackoffSettings
from asgi_router.config.settings import RouterSettings
from asgi_router.core.reasons import Reason

__all__ = ["RetryPolicy", "full_jitter", "retry_wait"]

# 2**30 * any sane base is past any cap; stop doubling there.
_MAX_EXPONENT: Final = 30


def full_jitter(retry: int, backoff: BackoffSettings, random: Callable[[], float]) -> float:
    """The wait before retry ``retry`` (0 for the first retry), in seconds."""
    return random() * min(backoff.cap, backoff.base * 2.0 ** min(retry, _MAX_EXPONENT))


def retry_wait(
    hint: float | None,
    retry: int,
    *,
    backoff: BackoffSettings,
    max_retry_wait: float,
    remaining: float,
    random: Callable[[], float],
) -> float | None:
    """Seconds to wait before retrying, or ``None`` when the retry should not happen.

    ``hint`` is what the upstream asked for (``None`` if nothing); ``remaining`` is what is
    left of the request's deadline.
    """
    if hint is not None:
        if hint > max_retry_wait:
            return None
        wait = hint
    else:
        wait = full_jitter(retry, backoff, random)
    return wait if wait < remaining else None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The router-wide limits the attempt loop applies to every plan."""

    retry_on: frozenset[Reason]
    backoff: BackoffSettings
    max_retry_wait: float
    max_attempts: int
    deadline: float
    #: Retries in place per candidate of a plan that does not set its own (``retries``).
    retries: int = 2

    @classmethod
    def from_settings(cls, settings: RouterSettings) -> RetryPolicy:
        return cls(
            settings.retry_on,
            settings.backoff,
            settings.max_retry_wait,
            settings.max_attempts,
            settings.deadline,
            settings.retries,
        )
