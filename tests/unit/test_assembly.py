"""The builder and the middleware agree on the keywords a router is built from."""

from __future__ import annotations

import inspect

from asgi_router import ModelRouter
from asgi_router.assembly import assemble


def test_every_model_router_keyword_is_passed_on_to_assemble_with_the_same_default() -> None:
    router = inspect.signature(ModelRouter.__init__).parameters
    builder = inspect.signature(assemble).parameters
    keywords = {name: p.default for name, p in router.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keywords == {name: p.default for name, p in builder.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
