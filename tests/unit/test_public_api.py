"""The public API: what ``asgi_router`` and its test kit export is pinned, and every module says what it exports.

Users import from ``asgi_router`` (and their tests from ``asgi_router.testing``); a name that
appears or disappears there is a change they see, so it must be a deliberate one (and a
CHANGELOG entry), never the side effect of a refactoring.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import asgi_router
import asgi_router.testing

_PACKAGE = Path(asgi_router.__file__).parent

EXPORTED = {
    # the middleware and the seam it sends through
    "ModelRouter",
    "Transport",
    "UpstreamResponse",
    # settings models
    "RouterSettings",
    "ProviderSettings",
    "Timeouts",
    "PoolSettings",
    "GroupSettings",
    "MemberSettings",
    "RuleSettings",
    "ModelInfo",
    "DegradedSettings",
    "BackoffSettings",
    "BreakerSettings",
    "RetryBudgetSettings",
    "HealthSettings",
    "EventSettings",
    "Authorize",
    "GuardrailSettings",
    # your own guardrails
    "GuardrailRequest",
    "GuardrailResult",
    "Allow",
    "Mask",
    "Block",
    "Flag",
    # errors
    "ConfigError",
    "RouterError",
    "AttemptSummary",
    "Forbidden",
    "UpstreamError",
    "UpstreamConnectError",
    "UpstreamTimeout",
    "UpstreamBroken",
    # events and sinks
    "Reason",
    "AttemptEvent",
    "RequestRecord",
    "Sink",
    "RecentRequests",
    "JsonlSink",
    # the state a router keeps
    "RouterState",
    "InMemoryState",
    "RoutingStats",
    "InMemoryStats",
}


def test_the_package_exports_exactly_the_public_api() -> None:
    assert set(asgi_router.__all__) == EXPORTED
    for name in EXPORTED:
        assert getattr(asgi_router, name) is not None


#: The test kit's public names (``docs/testing.md``): what a user's tests import.
KIT_EXPORTED = {"AppServer", "CapturedEvents", "FakeUpstream", "Hit", "TEST_KEY", "reply"}


def test_the_test_kit_exports_exactly_its_documented_names() -> None:
    assert set(asgi_router.testing.__all__) == KIT_EXPORTED
    for name in KIT_EXPORTED:
        assert getattr(asgi_router.testing, name) is not None


def _modules() -> list[str]:
    return sorted(
        ".".join(path.relative_to(_PACKAGE.parent).with_suffix("").parts)
        for path in _PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
    )


@pytest.mark.parametrize("module", _modules())
def test_every_module_declares_what_it_exports_and_exports_only_what_it_defines(module: str) -> None:
    loaded = importlib.import_module(module)
    exported = getattr(loaded, "__all__", None)
    assert exported is not None, f"{module} has no __all__"
    tree = ast.parse(Path(loaded.__file__ or "").read_text(encoding="utf-8"))
    defined: set[str] = set()
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(statement.name)
        elif isinstance(statement, ast.Assign):
            defined |= {target.id for target in statement.targets if isinstance(target, ast.Name)}
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            defined.add(statement.target.id)
    assert set(exported) <= defined, f"{module} exports names it does not define: {set(exported) - defined}"
