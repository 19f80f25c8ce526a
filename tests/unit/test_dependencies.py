"""What the library imports, its pyproject declares: an install into a fresh project must work.

A module that is only there because another dependency pulls it in (``yarl`` comes with
aiohttp) can disappear with that dependency's next release; importing it means declaring it.
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


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_top_level_modules(package: Path, leave_out: str | None = None) -> set[str]:
    names: set[str] = set()
    for module in package.rglob("*.py"):
        if leave_out is not None and module.relative_to(package).parts[0] == leave_out:
            continue
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _names(requirements: list[str]) -> set[str]:
    return {_canonical(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]) for requirement in requirements}


def _declared(extra: str | None = None) -> set[str]:
    project = tomllib.loads((_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return _names(project["dependencies"] if extra is None else project["optional-dependencies"][extra])


#: Sub-packages imported only when a setting asks for them, and the extra that installs what they import.
_OPTIONAL = {"fleet": "redis"}


def test_every_third_party_module_the_library_imports_is_a_declared_dependency() -> None:
    package = _ROOT / "asgi_router"
    third_party = _imported_top_level_modules(package) - set(sys.stdlib_module_names) - {"asgi_router"}
    for folder in _OPTIONAL:
        third_party -= _imported_top_level_modules(package / folder) - _imported_top_level_modules(package, folder)
    assert {"aiohttp", "yarl", "pydantic_settings"} <= third_party  # the scan still finds them
    distributions = packages_distributions()
    undeclared = {
        module: distributions.get(module, [module])
        for module in third_party
        if not any(_canonical(dist) in _declared() for dist in distributions.get(module, [module]))
    }
    assert not undeclared, f"imported but not in pyproject's dependencies: {undeclared}"


def test_the_shared_state_imports_only_the_redis_extra_beyond_the_dependencies() -> None:
    package = _ROOT / "asgi_router"
    for folder, extra in _OPTIONAL.items():
        only_there = _imported_top_level_modules(package / folder) - _imported_top_level_modules(package, folder)
        distributions = packages_distributions()
        undeclared = {
            module
            for module in only_there - set(sys.stdlib_module_names)
            if not any(_canonical(dist) in _declared(extra) for dist in distributions.get(module, [module]))
        }
        assert only_there, f"asgi_router/{folder} no longer needs its extra {extra!r}: drop it from _OPTIONAL"
        assert not undeclared, f"asgi_router/{folder} imports {undeclared}, not in the {extra!r} extra"


def test_a_router_without_state_url_never_imports_redis() -> None:
    """The redis extra is optional: a router in memory must work where redis-py is not installed."""
    code = (
        "import sys\n"
        "from asgi_router import ModelRouter, RouterSettings\n"
        "ModelRouter(lambda *a: None, settings=RouterSettings(allow_unauthenticated=True))\n"
        "assert 'redis' not in sys.modules, 'redis imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=_ROOT, timeout=60)
