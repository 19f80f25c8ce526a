"""The ``GET`` routes the router answers itself, and the inbound auth in front of each.

``/v1/models`` (``models.py``), the Prometheus ``metrics_route`` (``metrics_page.py``), the
``status_route`` with its JSON twin (``status.py``) and the ``usage_route``, where a caller reads
its own spend and caps (and only its own: the figures are the principal's that inbound auth
admitted, never a name the request chose). All sit behind the router's inbound auth:
group names, models, breakers and recent requests are the gateway's business, not an anonymous
caller's. Two differences, for who asks:

* the status page and its JSON are for a person's browser: ``api_keys`` are accepted as the
  password of HTTP Basic auth (any user name), and a refusal carries
  ``WWW-Authenticate: Basic``, so the browser asks for them. An ``authorize=`` callable sees the
  request's headers as they came and decides (Basic included, if it reads it);
* the metrics are for a scraper (Prometheus sends a bearer token or Basic credentials), or for
  nobody's credentials at all with ``metrics_public = true``.

Each page is built when asked for (a ``HEAD`` gets its headers only); an unexpected error is
logged and answered with a 500, as for chat requests.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal

from starlette.types import Receive, Scope, Send

from asgi_router.attempts.capacity import Capacity
from asgi_router.attempts.rate_limits import RateLimits
from asgi_router.config.named import named_models
from asgi_router.config.pages_settings import status_json_route
from asgi_router.config.settings import RouterSettings
from asgi_router.core.router_errors import RouterError
from asgi_router.endpoints.models import ModelsEndpoint
from asgi_router.endpoints.status import StatusEndpoint
from asgi_router.inbound.auth import Guard
from asgi_router.inbound.body import request_id_for
from asgi_router.inbound.mounting import route_path
from asgi_router.inbound.session_id import read_session_header, session_refusal
from asgi_router.observability.optional import metrics_for
from asgi_router.observability.sinks import EventBus, RecentRequests
from asgi_router.request.request_state import RequestState
from asgi_router.resilience.caller_limits import CallerLimits, caller_name, shown
from asgi_router.resilience.overview import Overview
from asgi_router.responses.error_reply import send_error, send_failure

if TYPE_CHECKING:  # prometheus_client is optional: imported only when metrics_route is set
    from asgi_router.endpoints.metrics_page import MetricsEndpoint
    from asgi_router.observability.metrics import RouterMetrics

__all__ = ["Page", "Pages", "build_pages"]

#: Who a page is for, which says how it is guarded.
Audience = Literal["api", "browser", "scraper", "anyone"]

_BASIC: Final = (b"www-authenticate", b'Basic realm="asgi_router", charset="UTF-8"')
_PAGE_HEADERS: Final = ((b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff"))


@dataclass(frozen=True, slots=True)
class Page:
    """One route: who it is for and what renders it (content type and body)."""

    audience: Audience
    render: Callable[[], tuple[bytes, bytes]]
    #: Extra response headers (the status page's Content-Security-Policy).
    headers: tuple[tuple[bytes, bytes], ...] = ()
    #: Renders for the admitted principal instead of :attr:`render` (the usage route).
    render_for: Callable[[object, Scope], tuple[bytes, bytes]] | None = None
    #: Refuses a request before it is rendered (the usage route: an over-long session id).
    screen: Callable[[Scope], RouterError | None] | None = None


class Pages:
    """Finds the page for a ``GET`` path and serves it behind the router's inbound auth."""

    __slots__ = ("_exact", "_guard", "_models")

    def __init__(
        self,
        guard: Guard,
        models: ModelsEndpoint | None,
        metrics: tuple[str, MetricsEndpoint, bool] | None,
        status: tuple[str, str, StatusEndpoint] | None,
        usage: Page | None = None,
        usage_route: str = "",
    ) -> None:
        self._guard = guard
        self._models = models
        self._exact: dict[str, Page] = {}
        if metrics is not None:
            route, endpoint, public = metrics
            self._exact[route] = Page("anyone" if public else "scraper", endpoint.render)
        if status is not None:
            route, json_route, page = status
            policy = ((b"content-security-policy", page.policy),)
            self._exact[route] = Page("browser", page.render_html, policy)
            self._exact[json_route] = Page("browser", page.render_json)
        if usage is not None:
            self._exact[usage_route] = usage

    def handles(self, path: str) -> bool:
        """Whether ``path`` (below ``root_path``) is one of the router's pages."""
        return path in self._exact or (self._models is not None and self._models.handles(path))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = RequestState(scope, receive, send, request_id_for(scope))
        try:
            page = self._exact.get(route_path(scope))
            audience = page.audience if page is not None else "api"
            principal: object = None
            if audience != "anyone":
                admitted = await (self._guard.check(scope) if audience == "api" else self._guard.check_page(scope))
                if isinstance(admitted, RouterError):
                    if audience == "browser" and admitted.status == 401:
                        admitted = replace(admitted, headers=(_BASIC,))  # the browser asks for them
                    await send_error(state, admitted)
                    return
                principal = admitted.principal
            if page is None:
                assert self._models is not None
                await self._models(scope, receive, state.send_tracked)
                return
            if page.screen is not None and (refused := page.screen(scope)) is not None:
                await send_error(state, refused)
                return
            content_type, body = page.render() if page.render_for is None else page.render_for(principal, scope)
            headers = [(b"content-type", content_type), *_PAGE_HEADERS, *page.headers]
            headers.append((b"content-length", str(len(body)).encode()))  # a HEAD's too: what a GET gets
            await state.send_tracked({"type": "http.response.start", "status": 200, "headers": headers})
            await state.send_tracked({"type": "http.response.body", "body": body if scope["method"] != "HEAD" else b""})
        except Exception:
            await send_failure(state)


def _nothing() -> tuple[bytes, bytes]:
    return b"text/plain", b""


def _session_screen(header: bytes, scope: Scope) -> RouterError | None:
    return session_refusal(scope["headers"], header)


def _usage(callers: CallerLimits | None) -> Callable[[object, Scope], tuple[bytes, bytes]]:
    """The usage route's renderer: the admitted caller's own figures, as JSON."""

    def render(principal: object, scope: Scope) -> tuple[bytes, bytes]:
        if callers is None:  # nothing is capped: a caller has no figures to read
            report: dict[str, object] = {"caller": shown(caller_name(principal)), "caps": []}
        else:
            report = callers.report(principal, scope)
        return b"application/json", json.dumps(report, separators=(",", ":")).encode()

    return render


def build_pages(
    settings: RouterSettings,
    guard: Guard,
    overview: Overview,
    recent: RecentRequests,
    events: EventBus,
    callers: CallerLimits | None = None,
    capacity: Capacity | None = None,
    rate_limits: RateLimits | None = None,
    ledger: Callable[[], dict[str, object]] | None = None,
    guardrail_blocks: Mapping[str, int] | None = None,
) -> tuple[RouterMetrics | None, Pages, list[Callable[[], Coroutine[Any, Any, None]]]]:
    """A router's pages as its settings ask for them: its metrics (``None``: off), the pages,
    and the work they need run from lifespan startup to shutdown (``callers``: the caller caps,
    whose figures the metrics, the status page and the usage route show; ``capacity`` and
    ``rate_limits``: sticky groups, queues and providers' stated limits, and ``guardrail_blocks``,
    each guardrail's blocks, for the status page; ``ledger``: the ledger's status, for the status
    page)."""
    models = ModelsEndpoint(settings, settings.models_route) if settings.models_route is not None else None
    metrics: RouterMetrics | None = None
    metrics_page: tuple[str, MetricsEndpoint, bool] | None = None
    background: list[Callable[[], Coroutine[Any, Any, None]]] = []
    if settings.metrics_route is not None:
        from asgi_router.endpoints.metrics_page import MetricsEndpoint, readings_of

        named = named_models(settings)
        metrics = metrics_for(
            named,
            readings_of(overview, events),
            callers.names if callers is not None else None,
            overview.targets(named),
        )
        endpoint = MetricsEndpoint(metrics)
        metrics_page = (settings.metrics_route, endpoint, settings.metrics_public)
        background.append(endpoint.keep_fresh)
    status: tuple[str, str, StatusEndpoint] | None = None
    if settings.status_route is not None:
        json_route = status_json_route(settings.status_route)
        page = StatusEndpoint(
            overview,
            recent,
            events,
            json_route,
            callers=callers,
            capacity=capacity,
            rate_limits=rate_limits,
            ledger=ledger,
            guardrail_blocks=guardrail_blocks,
        )
        status = (settings.status_route, json_route, page)
    usage: Page | None = None
    if settings.usage_route is not None:
        header = read_session_header(settings)
        screen = partial(_session_screen, header) if header is not None else None
        usage = Page("api", _nothing, render_for=_usage(callers), screen=screen)
    return metrics, Pages(guard, models, metrics_page, status, usage, settings.usage_route or ""), background
