"""What the library imports, its pyproject declares: an install into a fresh project must work.

A module that is only there because another dependency pulls it in (``yarl`` comes with
aiohttp) can disappear with that dependency's next release; importing it means declaring it.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_top_level_modules(package: Path) -> set[str]:
    names: set[str] = set()
    for module in package.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _declared() -> set[str]:
    project = tomllib.loads((_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {
        _canonical(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]) for requirement in project["dependencies"]
    }


def test_every_third_party_module_the_library_imports_is_a_declared_dependency() -> None:
    third_party = _imported_top_level_modules(_ROOT / "asgi_router") - set(sys.stdlib_module_names) - {"asgi_router"}
    assert {"aiohttp", "yarl", "pydantic_settings"} <= third_party  # the scan still finds them
    distributions = packages_distributions()
    undeclared = {
        module: distributions.get(module, [module])
        for module in third_party
        if not any(_canonical(dist) in _declared() for dist in distributions.get(module, [module]))
    }
    assert not undeclared, f"imported but not in pyproject's dependencies: {undeclared}"
