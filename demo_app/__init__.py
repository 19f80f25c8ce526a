"""A FastAPI app with ``asgi_router.ModelRouter`` mounted and built-in mock upstreams.

``python -m demo_app`` serves it all in one process (no API keys needed). From code::

    from demo_app import running_demo

    async with running_demo() as demo:      # starts the mock upstreams on free ports
        app = demo.app                      # the host FastAPI app, ModelRouter mounted

Importing this package starts nothing.
"""

from .app import DEFAULT_FIRST_BYTE_TIMEOUT, Demo, build_settings, create_app, running_demo
from .mock_upstreams import MockSpec, MockUpstreams, create_mock_app, default_specs

__all__ = [
    "DEFAULT_FIRST_BYTE_TIMEOUT",
    "Demo",
    "MockSpec",
    "MockUpstreams",
    "build_settings",
    "create_app",
    "create_mock_app",
    "default_specs",
    "running_demo",
]
