"""Full-jitter backoff and the retry-or-not decision, with randomness injected."""

from __future__ import annotations

import pytest

from asgi_router.config.resilience_settings import BackoffSettings
from asgi_router.resilience.retry import full_jitter, retry_wait

BACKOFF = BackoffSettings(base=0.25, cap=4.0)


@pytest.mark.parametrize(
    ("retry", "ceiling"),
    [(0, 0.25), (1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 4.0), (60, 4.0)],
)
def test_full_jitter_ceiling_doubles_per_retry_up_to_the_cap(retry: int, ceiling: float) -> None:
    assert full_jitter(retry, BACKOFF, lambda: 1.0) == pytest.approx(ceiling)
    assert full_jitter(retry, BACKOFF, lambda: 0.5) == pytest.approx(ceiling / 2)
    assert full_jitter(retry, BACKOFF, lambda: 0.0) == 0.0


def _wait(hint: float | None, retry: int = 0, remaining: float = 100.0, draw: float = 0.5) -> float | None:
    return retry_wait(hint, retry, backoff=BACKOFF, max_retry_wait=10.0, remaining=remaining, random=lambda: draw)


def test_without_a_hint_the_wait_is_the_jittered_backoff() -> None:
    assert _wait(None, retry=2, draw=0.5) == pytest.approx(0.5)


def test_a_hint_replaces_the_backoff() -> None:
    assert _wait(3.0, retry=0, draw=0.0) == 3.0


def test_a_hint_up_to_max_retry_wait_is_waited() -> None:
    assert _wait(10.0) == 10.0


def test_a_hint_longer_than_max_retry_wait_is_not_waited() -> None:
    assert _wait(10.01) is None


def test_a_wait_that_would_outrun_the_deadline_is_no_retry() -> None:
    assert _wait(2.0, remaining=2.0) is None
    assert _wait(2.0, remaining=2.5) == 2.0
    assert _wait(None, retry=4, remaining=1.0, draw=0.9) is None  # 3.6 s of backoff, 1 s left


def test_backoff_settings_refuse_a_cap_below_the_base() -> None:
    with pytest.raises(ValueError, match="cap"):
        BackoffSettings(base=2.0, cap=1.0)
