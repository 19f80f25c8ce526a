"""``GET /v1/models``: what a client may put in ``model``, in OpenAI's list shape.

SDKs, chat UIs and agents discover models through this endpoint (the ``openai`` SDK's
``client.models.list()``). The router answers it from configuration alone: every group as
``group/<id>``, every alias, and every concrete ``provider/model-id`` the configuration names
(group members, alias and rule targets, catalog entries). It never asks an upstream: listing
must not depend on, or leak, which providers are up. ``GET /v1/models/<id>`` retrieves one entry
(ids may contain ``/``) or answers an OpenAI-shaped 404.

The body is built once at start-up; serving it is a dictionary lookup. ``models_route = None``
in config leaves the path to the host app.
"""

from __future__ import annotations

import json
from typing import Final

from starlette.types import Receive, Scope, Send

from asgi_router.config.named import named_models
from asgi_router.config.settings import RouterSettings
from asgi_router.core.refs import GROUP_NAMESPACE
from asgi_router.core.router_errors import error_body
from asgi_router.inbound.mounting import route_path

__all__ = ["ModelsEndpoint", "ROUTER_OWNER", "listed_models"]

#: ``owned_by`` of the names the router itself defines (groups and aliases).
ROUTER_OWNER: Final = "asgi-router"


def listed_models(settings: RouterSettings) -> list[dict[str, object]]:
    """The model objects to list: groups, then aliases, then direct models (each sorted)."""
    entries: dict[str, str] = {}
    for name in sorted(settings.groups):
        entries[f"{GROUP_NAMESPACE}/{name}"] = ROUTER_OWNER
    for name in sorted(settings.aliases):
        entries[name] = ROUTER_OWNER
    for name in sorted(named_models(settings)):
        entries[name] = name.split("/", 1)[0]
    return [{"id": name, "object": "model", "created": 0, "owned_by": owner} for name, owner in entries.items()]


def _json(payload: object) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


class ModelsEndpoint:
    """Serves the list and single-model lookups from bodies precomputed at start-up."""

    __slots__ = ("_list", "_one", "_prefix", "route")

    def __init__(self, settings: RouterSettings, route: str) -> None:
        models = listed_models(settings)
        self.route = route
        self._prefix = route.rstrip("/") + "/"
        self._list = _json({"object": "list", "data": models})
        self._one = {str(model["id"]): _json(model) for model in models}

    def handles(self, path: str) -> bool:
        return path == self.route or path.startswith(self._prefix)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = route_path(scope)
        if path == self.route:
            status, body = 200, self._list
        else:
            model_id = path[len(self._prefix) :]
            found = self._one.get(model_id)
            if found is not None:
                status, body = 200, found
            else:
                status = 404
                body = error_body(404, "model_not_found", f"model {model_id[:128]!r} is not offered by this router")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body if scope["method"] != "HEAD" else b""})
