"""What the library imports, its pyproject declares: an install into a fresh project must work.

A module that is only there because another dependency pulls it in (``yarl`` comes with
aiohttp) can disappear with that dependency's next release; importing it means declaring it.
The test kit (``asgi_router.testing`` and its pytest plugin) may also use the ``testing`` extra.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
_TESTING = _ROOT / "asgi_router" / "testing"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_top_level_modules(*paths: Path) -> set[str]:
    names: set[str] = set()
    for path in paths:
        for module in path.rglob("*.py") if path.is_dir() else [path]:
            if path != _TESTING and _TESTING in module.parents:
                continue  # the test kit: its own extra (below)
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
    undeclared = _undeclared(third_party, _declared())
    assert not undeclared, f"imported but not in pyproject's dependencies: {undeclared}"


def test_the_test_kit_and_its_plugin_import_only_the_library_and_the_testing_extra() -> None:
    kit = _imported_top_level_modules(_TESTING, _ROOT / "_asgi_router_pytest.py")
    assert {"uvicorn", "pytest"} <= kit
    undeclared = _undeclared(kit, _declared("testing"))
    assert not undeclared, f"imported by the test kit but not in the 'testing' extra: {undeclared}"
