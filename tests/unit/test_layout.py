"""The package's floor plan stays readable: unique module names, and sub-packages that say what they hold.

A newcomer finds a module by its name and a sub-package by its docstring. Two modules with one
base name (three ``state.py`` once) make every traceback, grep and import ambiguous; a sub-package
docstring that forgot a module hides it. ``docs/layout.md`` draws the same plan for the docs site.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

import asgi_router

_PACKAGE = Path(asgi_router.__file__).parent
_ROOT = _PACKAGE.parent
#: Files that are not modules with a job of their own: a package's docstring, ``python -m``.
_NOT_MODULES = frozenset({"__init__.py", "__main__.py"})

#: Modules a sub-package's docstring does not name yet, because another change owns that
#: docstring (issue 20: the attempt policy and the request pipeline). Exact: once the docstring
#: names a module, its entry here must go, so the list cannot outlive its reason.
_NOT_YET_NAMED: dict[str, frozenset[str]] = {}


def _modules() -> list[Path]:
    return sorted(path for path in _PACKAGE.rglob("*.py") if path.name not in _NOT_MODULES)


def _sub_packages() -> list[Path]:
    return sorted(init.parent for init in _PACKAGE.rglob("__init__.py") if init.parent != _PACKAGE)


def test_no_two_modules_of_the_package_share_a_base_name() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        by_name[path.stem].append(str(path.relative_to(_ROOT)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, (
        f"modules sharing a base name: {shared}; rename so each name says its job "
        "(a settings model in config/ is <concern>_settings.py)"
    )


def _names(docstring: str, module: str) -> bool:
    """Whether ``docstring`` names ``module``: ``module.py``, ``module`` or a dotted path ending in it."""
    return re.search(rf"``(?:[\w.]+\.)?{re.escape(module)}(?:\.py)?``", docstring) is not None


@pytest.mark.parametrize("folder", _sub_packages(), ids=lambda folder: folder.name)
def test_every_sub_package_docstring_names_each_of_its_modules(folder: Path) -> None:
    init = folder / "__init__.py"
    docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    modules = sorted(path.stem for path in folder.glob("*.py") if path.name not in _NOT_MODULES)
    missing = {module for module in modules if not _names(docstring, module)}
    pending = _NOT_YET_NAMED.get(folder.name, frozenset())
    where = init.relative_to(_ROOT)
    unexpected = sorted(missing - pending)
    assert not unexpected, (
        f"{where}'s docstring does not name {', '.join(f'``{m}.py``' for m in unexpected)}: add each, "
        "in double backticks, with a few words on what it does (as the docstring does for the others)"
    )
    named_now = sorted(pending - missing)
    assert not named_now, (
        f"{where}'s docstring now names {named_now}: remove them from _NOT_YET_NAMED in tests/unit/test_layout.py"
    )


def _drawn_modules() -> set[str]:
    """The module paths the layout page draws (its ``text`` block under "The modules")."""
    page = (_ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    block = page.split("## The modules", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    folders: list[str] = []
    drawn: set[str] = set()
    for line in block.splitlines():
        name = line.split()[0]
        depth = (len(line) - len(line.lstrip())) // 2
        del folders[depth:]
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
        else:
            drawn.add("/".join([*folders, name]))
    return drawn


def test_the_layout_page_draws_every_module_and_only_those() -> None:
    modules = {
        str(path.relative_to(_ROOT))
        for path in _PACKAGE.rglob("*.py")
        if path.name != "__init__.py" or path.parent == _PACKAGE
    }
    drawn = _drawn_modules()
    assert not modules - drawn, (
        f"docs/layout.md's module drawing lacks {sorted(modules - drawn)}: add a line for each under its "
        "folder (indented two spaces per level), with a few words on its job"
    )
    assert not drawn - modules, f"docs/layout.md draws modules that do not exist: {sorted(drawn - modules)}"
