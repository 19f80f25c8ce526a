"""What the library imports, its pyproject declares: an install into a fresh project must work.

A module that is only there because another dependency pulls it in (``yarl`` comes with
aiohttp) can disappear with that dependency's next release; importing it means declaring it.
The test kit (``asgi_router.testing`` and its pytest plugin) may also use the ``testing`` extra.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
_TESTING = _ROOT / "asgi_router" / "testing"
_FLEET = _ROOT / "asgi_router" / "fleet"
#: Sub-packages imported only when a setting asks for them, and the extra that installs what they import.
_OPTIONAL = {_FLEET: "redis"}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_top_level_modules(*paths: Path) -> set[str]:
    names: set[str] = set()
    for path in paths:
        for module in path.rglob("*.py") if path.is_dir() else [path]:
            if any(path != folder and folder in module.parents for folder in (_TESTING, *_OPTIONAL)):
                continue  # the test kit and the optional sub-packages: their own extras (below)
            for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"asgi_router"}


def _declared(extra: str | None = None) -> set[str]:
    project = tomllib.loads((_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = project["dependencies"] + (project["optional-dependencies"][extra] if extra else [])
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
    assert {"aiohttp", "yarl", "pydantic_settings"} <= third_party  # the scan still finds them
    assert "uvicorn" not in third_party  # the kit is left out of the scan
    assert "redis" not in third_party  # so is the fleet's shared state
    undeclared = _undeclared(third_party, _declared())
    assert not undeclared, f"imported but not in pyproject's dependencies: {undeclared}"


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
