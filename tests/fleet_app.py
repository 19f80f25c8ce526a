"""The app each router process of the fleet tests serves: a host app with a ``/health`` route and
``ModelRouter`` configured from the TOML file named by ``FLEET_CONFIG``."""

from __future__ import annotations

import logging
import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_router import ModelRouter

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")


async def health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


app = Starlette(routes=[Route("/health", health)])
app.add_middleware(ModelRouter, config=os.environ["FLEET_CONFIG"])
