"""Opt-in active health probes: ``GET base_url + path`` per provider, in the background.

The probe carries the provider's key in its ``auth_header``, its fixed ``query`` parameters and,
for an Anthropic provider, its ``anthropic-version``: what its API needs to answer at all.

A provider with ``health = {interval = 5, path = "/models"}`` is probed every ``interval``
seconds from lifespan startup to shutdown, on a client of its own (probes never take a
connection from the request pool, and requests never wait on a probe). What the probe says
goes to the provider's breaker through the :class:`~asgi_router.resilience.gate.Gate`:

* ``unhealthy_threshold`` failures in a row open it (and keep it open while they continue);
* a success lets it close once it is due to probe (half-open, or open past ``open_for``).

A failure is what says "down": a connect error, a timeout, or a 5xx. Any other answer (200,
but also 401 or 404) shows the provider up and serving; whether its key or the probed path
is right is not this probe's question.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import httpx2

from asgi_router.config.resilience_settings import HealthSettings
from asgi_router.config.settings import RouterSettings
from asgi_router.core.classify import classify_status
from asgi_router.observability.events import logger
from asgi_router.resilience.gate import Gate
from asgi_router.transports.httpx_transport import translate
from asgi_router.transports.provider import ProviderRuntime

__all__ = ["HealthProber"]


@dataclass(frozen=True, slots=True)
class _Target:
    provider: str
    url: str
    headers: dict[str, str]
    health: HealthSettings


class HealthProber:
    """Probes every provider that has ``health`` set, until cancelled."""

    def __init__(self, settings: RouterSettings, runtimes: Mapping[str, ProviderRuntime], gate: Gate) -> None:
        self._gate = gate
        self._targets = [
            _Target(
                name,
                provider.base_url + provider.health.path + runtimes[name].query,
                runtimes[name].headers,
                provider.health,
            )
            for name, provider in settings.providers.items()
            if provider.health is not None and runtimes[name].configured
        ]

    @property
    def providers(self) -> list[str]:
        """The providers probed (from lifespan startup to shutdown)."""
        return [target.provider for target in self._targets]

    async def run(self) -> None:
        if not self._targets:
            return
        async with (
            httpx2.AsyncClient(trust_env=False, follow_redirects=False) as client,
            asyncio.TaskGroup() as tasks,
        ):
            for target in self._targets:
                tasks.create_task(self._watch(client, target))

    async def _watch(self, client: httpx2.AsyncClient, target: _Target) -> None:
        failures = 0
        while True:
            healthy = await self.probe(client, target)
            if healthy is True:
                failures = 0
                self._gate.recover(target.provider)
            elif healthy is False:
                failures += 1
                if failures >= target.health.unhealthy_threshold:
                    if failures == target.health.unhealthy_threshold:
                        logger.warning("%s fails its health probes; opening its breaker", target.provider)
                    self._gate.trip(target.provider)
            await asyncio.sleep(target.health.interval)

    @staticmethod
    async def probe(client: httpx2.AsyncClient, target: _Target) -> bool | None:
        """One probe: healthy, unhealthy, or ``None`` when the probe itself broke (a bug)."""
        try:
            async with asyncio.timeout(target.health.timeout):
                response = await client.get(
                    target.url, headers=target.headers, timeout=httpx2.Timeout(target.health.timeout)
                )
        except TimeoutError:
            return False
        except httpx2.HTTPError as exc:
            if translate(exc) is not None:  # the transport's own reading: connection, timeout
                return False
            logger.exception("health probe of %s failed unexpectedly", target.provider)
            return None
        except Exception:
            logger.exception("health probe of %s failed unexpectedly", target.provider)
            return None
        return classify_status(response.status_code) not in ("upstream_5xx", "timeout")
