"""The router's own pages: ``/v1/models``, the Prometheus ``metrics_route`` and the ``status_route``.

Each is a ``GET`` path the router answers itself instead of the host app. What only the whole can
check is checked here, when the settings are built: no two of them (and no chat route) on one
path, a status route whose JSON twin (``status_route + ".json"``) is a path of its own, and a
``metrics_route`` only where ``prometheus_client`` is installed (the ``metrics`` extra), so that
a missing package stops the start-up with the command that installs it rather than a scrape
failing later.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Final

__all__ = ["METRICS_EXTRA", "check_page_route", "check_pages", "status_json_route"]

#: What installs ``prometheus_client`` for the router.
METRICS_EXTRA: Final = "pip install 'asgi-router[metrics]'"


def check_page_route(name: str, value: str | None) -> str | None:
    """A page route as settings take it: ``""`` (what TOML and the environment can say) is off."""
    if value == "":
        return None
    if value is not None and (not value.startswith("/") or any(ch in value for ch in "?# \t\r\n")):
        raise ValueError(f"{name} {value!r} must be a path starting with '/' (no query, fragment or space)")
    return value


def status_json_route(status_route: str) -> str:
    """The status page's JSON twin."""
    return status_route + ".json"


def check_pages(
    routes: Sequence[str],
    models_route: str | None,
    metrics_route: str | None,
    status_route: str | None,
    usage_route: str | None = None,
) -> None:
    """Refuse two pages (or a page and a chat route) on one path, and metrics without their package."""
    if status_route is not None and status_route.endswith("/"):
        raise ValueError(f"status_route {status_route!r} must not end with '/' (its JSON twin adds '.json')")
    taken = {route: "routes" for route in routes}
    pages = [("models_route", models_route), ("metrics_route", metrics_route), ("status_route", status_route)]
    pages.append(("usage_route", usage_route))
    if status_route is not None:
        pages.append(("status_route + '.json'", status_json_route(status_route)))
    for name, path in pages:
        if path is None:
            continue
        if path in taken:
            raise ValueError(f"{name} {path!r} is already taken by {taken[path]}")
        taken[path] = name
    if metrics_route is not None and importlib.util.find_spec("prometheus_client") is None:
        raise ValueError(
            f"metrics_route needs prometheus_client, which is not installed here: {METRICS_EXTRA} "
            "(or leave metrics_route unset)"
        )
