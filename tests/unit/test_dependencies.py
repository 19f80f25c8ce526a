"""What the library imports, its pyproject declares: an install into a fresh project must work.

A module that is only there because another dependency pulls it in (``yarl`` comes with
aiohttp) can disappear with that dependency's next release; importing it means declaring it.
The test kit (``asgi_router.testing`` and its pytest plugin) may also use the ``testing`` extra.
The optional extras ``metrics`` (prometheus_client) and ``otel`` (opentelemetry-api) are
imported only by the modules that need them, and a router without them works.
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
_TESTING = _ROOT / "asgi_router" / "testing"
_FLEET = _ROOT / "asgi_router" / "fleet"
#: Sub-packages imported only when a setting asks for them, and the extra that installs what they import.
_OPTIONAL = {_FLEET: "redis", _ROOT / "asgi_router" / "ledger" / "postgres_database.py": "postgres"}
_PACKAGE = _ROOT / "asgi_router"
#: The library's optional extras, and the only modules that import them when the module loads.
_EXTRAS = {
    "metrics": {
        "prometheus_client": {
            "observability/metrics.py",
            "observability/caller_metrics.py",
            "observability/cache_metrics.py",
        }
    },
    "otel": {"opentelemetry": {"observability/tracing.py"}},
    "semantic": {"numpy": {"caching/semantic_index.py"}},
}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _top_level(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return {node.module.split(".")[0]}
    return set()


def _imported_on_load(module: Path) -> set[str]:
    """What ``module`` imports as it loads: module-level imports outside ``if TYPE_CHECKING``."""
    names: set[str] = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for inner in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else ():
            names |= _top_level(inner)
    return names


def _imported_top_level_modules(*paths: Path) -> set[str]:
    names: set[str] = set()
    for path in paths:
        for module in path.rglob("*.py") if path.is_dir() else [path]:
            if any(path != folder and folder in (module, *module.parents) for folder in (_TESTING, *_OPTIONAL)):
                continue  # the test kit and the optional sub-packages: their own extras (below)
            for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"asgi_router"}


def _declared(*extras: str) -> set[str]:
    project = tomllib.loads((_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    return {_canonical(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]) for requirement in requirements}


def _undeclared(modules: set[str], declared: set[str]) -> dict[str, list[str]]:
    distributions = packages_distributions()
    return {
        module: distributions.get(module, [module])
        for module in modules
        if not any(_canonical(dist) in declared for dist in distributions.get(module, [module]))
    }


def test_every_third_party_module_the_library_imports_is_a_declared_dependency() -> None:
    third_party = _imported_top_level_modules(_ROOT / "asgi_router")
    assert {"aiohttp", "yarl", "pydantic_settings", "prometheus_client"} <= third_party  # the scan still finds them
    assert "redis" not in third_party  # so is the fleet's shared state
    undeclared = _undeclared(third_party, _declared(*_EXTRAS))
    assert not undeclared, f"imported but not in pyproject's dependencies or its metrics/otel extras: {undeclared}"


def test_the_test_kit_and_its_plugin_import_only_the_library_and_the_testing_extra() -> None:
    kit = _imported_top_level_modules(_TESTING, _ROOT / "_asgi_router_pytest.py")
    assert {"uvicorn", "pytest"} <= kit
    undeclared = _undeclared(kit, _declared("testing"))
    assert not undeclared, f"imported by the test kit but not in the 'testing' extra: {undeclared}"


def test_the_shared_state_imports_only_the_redis_extra_beyond_the_dependencies() -> None:
    for folder, extra in _OPTIONAL.items():
        only_there = _imported_top_level_modules(folder) - _imported_top_level_modules(_ROOT / "asgi_router")
        assert only_there, f"{folder.name} no longer needs its extra {extra!r}: drop it from _OPTIONAL"
        undeclared = _undeclared(only_there, _declared(extra))
        assert not undeclared, f"asgi_router/{folder.name} imports {undeclared}, not in the {extra!r} extra"


def test_a_router_without_state_url_never_imports_redis() -> None:
    """The redis extra is optional: a router in memory must work where redis-py is not installed."""
    code = (
        "import sys\n"
        "from asgi_router import ModelRouter, RouterSettings\n"
        "ModelRouter(lambda *a: None, settings=RouterSettings(allow_unauthenticated=True))\n"
        "assert 'redis' not in sys.modules, 'redis imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=_ROOT, timeout=60)


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
