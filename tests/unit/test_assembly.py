"""The builder takes ``ModelRouter``'s keywords from one list, and refuses a keyword not on it."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette

from asgi_router import ModelRouter
from asgi_router.assembly import RouterKeywords


def test_model_router_refuses_a_keyword_not_in_its_list_with_a_type_error() -> None:
    with pytest.raises(TypeError, match="unexpected keyword arguments: setting"):
        ModelRouter(Starlette(), setting=None)  # type: ignore[call-arg]


def test_the_keyword_list_names_every_seam_a_router_offers() -> None:
    assert RouterKeywords.__optional_keys__ == {
        "settings",
        "config",
        "http_client",
        "transport",
        "clock",
        "random",
        "state",
        "sinks",
        "stats",
        "rng",
        "authorize",
        "tracer_provider",
        "guardrails",
    }
    assert not RouterKeywords.__required_keys__
