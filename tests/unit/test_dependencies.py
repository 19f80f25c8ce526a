"""What the library imports, its pyproject declares: an install into a fresh project must work.

A module that is only there because another dependency pulls it in (``yarl`` comes with
aiohttp) can disappear with that dependency's next release; importing it means declaring it.
The optional extras (``metrics``: prometheus_client, ``otel``: opentelemetry-api) are declared
as extras, imported only by the modules that need them, and a router without them works.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
_PACKAGE = _ROOT / "asgi_router"
#: The library's optional extras, and the only modules that import them when the module loads.
_EXTRAS = {
    "metrics": {"prometheus_client": {"observability/metrics.py"}},
    "otel": {"opentelemetry": {"observability/tracing.py"}},
}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _top_level(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return {node.module.split(".")[0]}
    return set()


def _imported_top_level_modules(package: Path) -> set[str]:
    names: set[str] = set()
    for module in package.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            names |= _top_level(node)
    return names


def _imported_on_load(module: Path) -> set[str]:
    """What ``module`` imports as it loads: module-level imports outside ``if TYPE_CHECKING``."""
    names: set[str] = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for inner in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else ():
            names |= _top_level(inner)
    return names


def _requirements(requirements: list[str]) -> set[str]:
    return {_canonical(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]) for requirement in requirements}


def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project


def _declared() -> set[str]:
    project = _project()
    extras: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    declared = _requirements(project["dependencies"])  # type: ignore[arg-type]
    for extra in _EXTRAS:
        declared |= _requirements(extras[extra])
    return declared


def test_every_third_party_module_the_library_imports_is_a_declared_dependency() -> None:
    third_party = _imported_top_level_modules(_PACKAGE) - set(sys.stdlib_module_names) - {"asgi_router"}
    assert {"aiohttp", "yarl", "pydantic_settings", "prometheus_client"} <= third_party  # the scan still finds them
    distributions = packages_distributions()
    undeclared = {
        module: distributions.get(module, [module])
        for module in third_party
        if not any(_canonical(dist) in _declared() for dist in distributions.get(module, [module]))
    }
    assert not undeclared, f"imported but not in pyproject's dependencies or its metrics/otel extras: {undeclared}"


def test_an_optional_extra_is_imported_on_load_only_by_the_module_it_is_for() -> None:
    for modules in _EXTRAS.values():
        for name, owners in modules.items():
            importers = {
                str(path.relative_to(_PACKAGE)) for path in _PACKAGE.rglob("*.py") if name in _imported_on_load(path)
            }
            assert importers == owners, f"{name} is imported on load by {importers}, expected only {owners}"


_WITHOUT_EXTRAS = textwrap.dedent(
    """
    import asyncio, sys

    # As if not installed: importing them fails, and find_spec finds nothing.
    sys.modules["prometheus_client"] = sys.modules["opentelemetry"] = None
    from asgi_router import ModelRouter, RouterSettings

    try:
        RouterSettings(allow_unauthenticated=True, metrics_route="/metrics")
    except ValueError as refusal:  # pydantic's ValidationError, as for any refused setting
        print("refused:", " ".join(str(refusal).split()))

    async def app(scope, receive, send):
        raise AssertionError("the host app is not asked")

    settings = RouterSettings(
        allow_unauthenticated=True,
        status_route="/router/status",
        providers={"down": {"base_url": "http://127.0.0.1:9/v1", "timeouts": {"connect": 1}}},
    )
    router = ModelRouter(app, settings=settings)
    body = b'{"model": "down/m", "messages": []}'

    async def main():
        sent = []
        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}
        async def send(message):
            sent.append(message)
        json_type = [(b"content-type", b"application/json")]
        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": json_type}
        scope["query_string"] = b""
        await router(scope, receive, send)
        print("chat:", sent[0]["status"])
        sent.clear()
        scope = {"type": "http", "method": "GET", "path": "/router/status.json", "headers": [], "query_string": b""}
        await router(scope, receive, send)
        print("status page:", sent[0]["status"])

    asyncio.run(main())
    optional = ("prometheus_client", "opentelemetry")
    loaded = [n for n, m in sys.modules.items() if m is not None and n.split(".")[0] in optional]
    print("loaded:", loaded)
    """
)


def test_the_library_serves_without_its_optional_extras_and_refuses_metrics_with_the_install_command() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS], capture_output=True, text=True, timeout=60, cwd=_ROOT, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "pip install 'asgi-router[metrics]'" in lines[0] and lines[0].startswith("refused:"), lines
    assert "metrics_route" in lines[0]
    assert lines[1:] == ["chat: 502", "status page: 200", "loaded: []"]
