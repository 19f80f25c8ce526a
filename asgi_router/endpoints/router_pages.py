"""The ``GET`` routes the router answers itself, and the inbound auth in front of each.

``/v1/models`` (``models.py``), the Prometheus ``metrics_route`` (``metrics.py``) and the
``status_route`` with its JSON twin (``status.py``). All sit behind the router's inbound auth:
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

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal

from starlette.types import Receive, Scope, Send

from asgi_router.config.named import named_models
from asgi_router.config.pages_settings import status_json_route
from asgi_router.config.settings import RouterSettings
from asgi_router.core.router_errors import RouterError
from asgi_router.endpoints.models import ModelsEndpoint
from asgi_router.endpoints.status import StatusEndpoint
from asgi_router.inbound.auth import Guard
from asgi_router.inbound.body import request_id_for
from asgi_router.inbound.mounting import route_path
from asgi_router.observability.optional import metrics_for
from asgi_router.observability.sinks import EventBus, RecentRequests
from asgi_router.resilience.overview import Overview
from asgi_router.responses.request_context import RequestContext

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


class Pages:
    """Finds the page for a ``GET`` path and serves it behind the router's inbound auth."""

    __slots__ = ("_exact", "_guard", "_models")

    def __init__(
        self,
        guard: Guard,
        models: ModelsEndpoint | None,
        metrics: tuple[str, MetricsEndpoint, bool] | None,
        status: tuple[str, str, StatusEndpoint] | None,
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

    def handles(self, path: str) -> bool:
        """Whether ``path`` (below ``root_path``) is one of the router's pages."""
        return path in self._exact or (self._models is not None and self._models.handles(path))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        context = RequestContext(scope, receive, send, request_id_for(scope))
        try:
            page = self._exact.get(route_path(scope))
            audience = page.audience if page is not None else "api"
            if audience != "anyone":
                admitted = await (self._guard.check(scope) if audience == "api" else self._guard.check_page(scope))
                if isinstance(admitted, RouterError):
                    if audience == "browser" and admitted.status == 401:
                        admitted = replace(admitted, headers=(_BASIC,))  # the browser asks for them
                    await context.send_error(admitted)
                    return
            if page is None:
                assert self._models is not None
                await self._models(scope, receive, context.send_tracked)
                return
            content_type, body = page.render()
            headers = [(b"content-type", content_type), *_PAGE_HEADERS, *page.headers]
            headers.append((b"content-length", str(len(body)).encode()))  # a HEAD's too: what a GET gets
            await context.send_tracked({"type": "http.response.start", "status": 200, "headers": headers})
            await context.send_tracked(
                {"type": "http.response.body", "body": body if scope["method"] != "HEAD" else b""}
            )
        except Exception:
            await context.failed()


def build_pages(
    settings: RouterSettings, guard: Guard, overview: Overview, recent: RecentRequests, events: EventBus
) -> tuple[RouterMetrics | None, Pages, list[Callable[[], Coroutine[Any, Any, None]]]]:
    """A router's pages as its settings ask for them: its metrics (``None``: off), the pages,
    and the work they need run from lifespan startup to shutdown."""
    models = ModelsEndpoint(settings, settings.models_route) if settings.models_route is not None else None
    metrics: RouterMetrics | None = None
    metrics_page: tuple[str, MetricsEndpoint, bool] | None = None
    background: list[Callable[[], Coroutine[Any, Any, None]]] = []
    if settings.metrics_route is not None:
        from asgi_router.endpoints.metrics_page import MetricsEndpoint, readings_of

        metrics = metrics_for(named_models(settings), readings_of(overview, events))
        endpoint = MetricsEndpoint(metrics)
        metrics_page = (settings.metrics_route, endpoint, settings.metrics_public)
        background.append(endpoint.keep_fresh)
    status: tuple[str, str, StatusEndpoint] | None = None
    if settings.status_route is not None:
        json_route = status_json_route(settings.status_route)
        status = (settings.status_route, json_route, StatusEndpoint(overview, recent, events, json_route))
    return metrics, Pages(guard, models, metrics_page, status), background
