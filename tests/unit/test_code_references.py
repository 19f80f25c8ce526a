"""Comments and docstrings name only what exists: a renamed module or method leaves no stale pointer.

A docstring that says "see ``attempts.py``" after ``attempts.py`` became a folder sends the next
reader looking for nothing. This reads every module of the package and checks the forms that are
unmistakably references to code (settings keys, JSON fields and header names are in double
backticks too, so plain words are left alone):

* a file name: ``name.py`` exists in the package (``pkg/name.py``: at that path in the package
  or the repository);
* a dotted path from the package: ``asgi_router.x.y`` imports, and its attributes resolve;
* a Sphinx role (``:class:``, ``:func:``, ``:meth:``, ``:mod:``, ``:attr:``, ``:data:``,
  ``:exc:``): its target resolves, from the package, from a module's base name (no two share
  one), from a class of the package, or from an importable module (``asyncio.timeout``);
* ``module.NAME``, ``Class.member`` and ``_private()`` in double backticks, where ``module`` is a
  module's base name and ``Class`` a class of the package: the member exists.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from collections import defaultdict
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import asgi_router

_PACKAGE = Path(asgi_router.__file__).parent
_ROOT = _PACKAGE.parent

_FILE = re.compile(r"``((?:[\w.-]+/)*[\w-]+\.py)``")
_LITERAL = re.compile(r"``([A-Za-z_][\w.]*)(\(\))?``")
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`~?(\.?[A-Za-z_][\w.]*)(?:\(\))?`")
_UPPER = re.compile(r"^_?[A-Z][A-Z0-9_]+$")
_CLASS_MEMBER = re.compile(r"(?<![\w.`~])([A-Z][a-z]\w*)\.(_?[a-z]\w*)\b")

#: References in files that another change of issue 20 owns (the attempt policy, the request
#: pipeline): they fix them there. Exact, like the layout test's list: a fixed one must go.
_OWNED_ELSEWHERE: frozenset[tuple[str, str]] = frozenset()


def _module_name(path: Path) -> str:
    parts = path.relative_to(_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> list[Path]:
    return sorted(_PACKAGE.rglob("*.py"))


@cache
def _file_names() -> frozenset[str]:
    return frozenset(path.name for path in _sources())


@cache
def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8")) for path in _sources()}


@cache
def _members(node: ast.ClassDef) -> frozenset[str]:
    """What a class body defines, its ``__slots__``, and what its methods assign to ``self``."""
    names: set[str] = set()
    for statement in node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(statement.name)
        elif isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
                    if target.id == "__slots__":
                        names |= {c.value for c in ast.walk(statement.value) if isinstance(c, ast.Constant)}
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            names.add(statement.target.id)
    for inner in ast.walk(node):
        if isinstance(inner, ast.Attribute) and isinstance(inner.ctx, ast.Store):
            if isinstance(inner.value, ast.Name) and inner.value.id == "self":
                names.add(inner.attr)
    return frozenset(names)


class _Index:
    """Every module, class and name the package defines, read from its source."""

    def __init__(self) -> None:
        self.modules: dict[str, str] = {}  # base name -> dotted module
        self.classes: dict[str, list[tuple[ast.ClassDef, str]]] = defaultdict(list)  # name -> (node, module)
        self.names: set[str] = set()  # any name defined anywhere: functions, classes, constants, members
        self.top: dict[str, set[str]] = defaultdict(set)  # module -> its top-level names
        for path, tree in _trees().items():
            module = _module_name(path)
            if path.name != "__init__.py":
                self.modules[path.stem] = module
            else:
                self.modules[path.parent.name] = module
            for statement in tree.body:
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.top[module].add(statement.name)
                elif isinstance(statement, ast.Assign):
                    self.top[module] |= {t.id for t in statement.targets if isinstance(t, ast.Name)}
                elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    self.top[module].add(statement.target.id)
                elif isinstance(statement, ast.ImportFrom):
                    self.top[module] |= {alias.asname or alias.name for alias in statement.names}
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    self.classes[node.name].append((node, module))
                    self.names |= _members(node)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.names.add(node.name)
            self.names |= self.top[module]

    def has_member(self, class_name: str, member: str, seen: frozenset[str] = frozenset()) -> bool:
        """Whether a class of the package (or a base of it, ours or a dependency's) has ``member``."""
        for node, module in self.classes.get(class_name, []):
            if member in _members(node):
                return True
            loaded = getattr(importlib.import_module(module), class_name, None)
            if loaded is not None and (hasattr(loaded, member) or member in getattr(loaded, "model_fields", {})):
                return True
            for base in node.bases:
                name = ast.unparse(base).split("[")[0].rsplit(".", 1)[-1]
                if name not in seen and self.has_member(name, member, seen | {class_name}):
                    return True
        return False

    def resolves(self, dotted: str) -> bool:
        """Whether ``asgi_router.x.y.Name.member`` names something (imports, then attributes)."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj: Any = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for index, part in enumerate(parts[cut:], start=cut):
                if hasattr(obj, part):
                    obj = getattr(obj, part)
                elif isinstance(obj, type) and index == len(parts) - 1:
                    return self.has_member(obj.__name__, part)
                else:
                    return False
            return True
        return False


@cache
def _index() -> _Index:
    return _Index()


def _importable(dotted: str) -> bool | None:
    """Whether ``dotted`` resolves from an importable module; ``None``: its head is no module."""
    head = dotted.split(".")[0]
    try:
        importlib.import_module(head)
    except ImportError:
        return None
    return _index().resolves(dotted) if head == "asgi_router" else _external(dotted)


def _external(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


def _role_target(target: str, module: str) -> bool:
    index = _index()
    if target.startswith("."):  # relative to the module's own package
        return index.resolves(module.rsplit(".", 1)[0] + target)
    head, _, rest = target.partition(".")
    if head == "asgi_router":
        return index.resolves(target)
    if head in index.modules and rest:
        return index.resolves(f"{index.modules[head]}.{rest}") or _module_member(head, rest)
    if head in index.classes:
        return not rest or index.has_member(head, rest.split(".")[0])
    if not rest:
        return head in index.names or hasattr(builtins, head) or _importable(head) is True
    return _importable(target) is True


def _module_member(module: str, name: str) -> bool:
    """``module.name``: defined at the module's top level, or by one of its classes."""
    index = _index()
    dotted = index.modules[module]
    first = name.split(".")[0]
    if first in index.top[dotted]:
        return True
    return any(index.has_member(c, first) for c, found in index.classes.items() if any(m == dotted for _, m in found))


def _literal(text: str, called: bool) -> bool | None:
    """A double-backticked dotted name: ``True``/``False`` when it is clearly code, else ``None``."""
    index = _index()
    head, _, rest = text.partition(".")
    if head == "asgi_router":
        return index.resolves(text)
    if rest and head in index.classes and head[0].isupper():
        return index.has_member(head, rest.split(".")[0])
    if rest and _UPPER.match(rest.split(".")[0]) and head.islower():
        if head in index.modules:
            return _module_member(head, rest)
        return _importable(text) is True  # ``errno.ECONNREFUSED``; a module that is gone is not
    if not rest and called and head.startswith("_") and not head.startswith("__"):
        return head in index.names
    return None


def _references(path: Path) -> Iterator[tuple[str, bool]]:
    """Each code reference in ``path``'s text, and whether it resolves."""
    text = path.read_text(encoding="utf-8")
    module = _module_name(path)
    for match in _FILE.finditer(text):
        name = match.group(1)
        if "/" in name:
            found = (_PACKAGE / name).exists() or (_ROOT / name).exists()
        else:
            found = name in _file_names() or (_ROOT / name).exists()
        yield f"``{name}``", found
    for match in _LITERAL.finditer(text):
        name, called = match.group(1), bool(match.group(2))
        if name.endswith(".py"):
            continue
        verdict = _literal(name, called)
        if verdict is not None:
            yield match.group(0), verdict
    for match in _ROLE.finditer(text):
        yield match.group(0), _role_target(match.group(1), module)
    index = _index()
    for match in _CLASS_MEMBER.finditer(text):  # unquoted, in prose: ``ModelRouter._note_served``
        head, member = match.group(1), match.group(2)
        if head in index.classes and not match.group(0).endswith(".py"):
            yield match.group(0), index.has_member(head, member)


def test_every_code_reference_in_the_packages_comments_and_docstrings_exists() -> None:
    checked = [
        (str(path.relative_to(_ROOT)), reference, found)
        for path in _sources()
        for reference, found in _references(path)
    ]
    assert len(checked) > 300, "the scan no longer finds the package's references"
    broken = {(path, reference) for path, reference, found in checked if not found}
    new = sorted(broken - _OWNED_ELSEWHERE)
    assert not new, "names that do not exist (renamed? removed?):\n" + "\n".join(f"{p}: {r}" for p, r in new)
    fixed = sorted(_OWNED_ELSEWHERE - broken)
    assert not fixed, f"fixed meanwhile, remove from _OWNED_ELSEWHERE in {Path(__file__).name}: {fixed}"


def test_the_reference_check_finds_a_stale_name() -> None:
    """The check itself: a renamed file, method and module path are each caught."""
    assert _role_target("asgi_router.fleet.shared_state.SharedState", "asgi_router.fleet") is True
    assert _role_target("asgi_router.fleet.state.SharedState", "asgi_router.fleet") is False
    assert _role_target(".link", "asgi_router.fleet.shared_state") is True
    assert _role_target(".wire", "asgi_router.inbound.body") is False
    assert _literal("ModelRouter._note_served", called=False) is False
    assert _literal("SharedState.fleet_rotation", called=False) is True
    assert _literal("link.REQUEST_TIMEOUT", called=False) is True
    assert _literal("link.NO_SUCH_TIMEOUT", called=False) is False
    assert _literal("inbound_auth.NO_INBOUND_AUTH", called=False) is False
    assert _literal("providers.openai.base_url", called=False) is None  # a settings key: not checked


_DOC_PATH = re.compile(r"`(asgi_router/[\w/]+\.(?:py|html))`")
_DOC_DOTTED = re.compile(r"`(asgi_router(?:\.\w+){2,})`")


def test_the_docs_name_only_module_paths_that_exist() -> None:
    """The site and the README follow the renames (the CHANGELOG keeps old names: it is history).

    Dotted names with one dot are left alone: ``asgi_router.route`` is a span attribute there.
    """
    pages = [*sorted((_ROOT / "docs").rglob("*.md")), _ROOT / "README.rst"]
    missing = [
        f"{page.relative_to(_ROOT)}: {name}"
        for page in pages
        for name in [m.group(1) for m in _DOC_PATH.finditer(page.read_text(encoding="utf-8"))]
        if not (_ROOT / name).exists()
    ] + [
        f"{page.relative_to(_ROOT)}: {name}"
        for page in pages
        for name in [m.group(1) for m in _DOC_DOTTED.finditer(page.read_text(encoding="utf-8"))]
        if not _index().resolves(name)
    ]
    assert not missing, "the docs name modules that do not exist:\n" + "\n".join(missing)
