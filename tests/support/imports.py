"""A source tree's imports, read from its files without running them.

:class:`SourceTree` holds the modules of some top-level packages by dotted
name and reads each one's import statements (:class:`Import`): function-local
ones included, relative names resolved, ``from package import name`` taken as
the submodule ``package.name`` when it is one (of the tree, or compiled or
generated and so absent as source), and those under ``if TYPE_CHECKING:``
marked as typing-only. Its :meth:`SourceTree.graph` is which module imports
which at run time; :func:`circles` finds the import circles in it.

Used by tests/test_layering.py; imports nothing of the project.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Import:
    """One module named by an import statement."""

    line: int
    name: str
    #: Under ``if TYPE_CHECKING:``: read by type checkers, never run.
    typing_only: bool


def module_name(path: Path, root: Path) -> str:
    """``a/b/c.py`` → ``a.b.c``; ``a/b/__init__.py`` → ``a.b``."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files(folder: Path) -> list[Path]:
    """Every ``.py`` file under ``folder``, sorted."""
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(node: ast.AST, typing_only: bool = False) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement below ``node``, with whether only type checkers run it."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node, typing_only
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for child in node.body:
            yield from _statements(child, True)
        for child in node.orelse:
            yield from _statements(child, typing_only)
        return
    for child in ast.iter_child_nodes(node):
        yield from _statements(child, typing_only)


def _bound_names(path: Path) -> set[str] | None:
    """The names a module binds at its top level, in branches too but not in
    function or class bodies (``None``: any name, after a ``*`` import or with
    a module ``__getattr__``)."""
    names: set[str] = set()
    pending = list(ast.parse(path.read_text(), filename=str(path)).body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.With,
                               ast.AsyncWith)):
            targets = [*getattr(node, "targets", ()), getattr(node, "target", None),
                       *(item.optional_vars for item in getattr(node, "items", ()))]
            names.update(n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name))
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                pending += getattr(node, field, [])
        elif isinstance(node, ast.ExceptHandler):
            names.update([node.name] if node.name else [])
            pending += node.body
    return None if "__getattr__" in names else names


class SourceTree:
    """The modules of some top-level ``packages`` under ``root`` and what they import."""

    def __init__(self, root: Path, packages: Iterable[str]):
        self.root = root
        #: Dotted name → file (a package's ``__init__.py``, which a folder without one lacks).
        self.modules: dict[str, Path] = {}
        for package in packages:
            for path in source_files(root / package):
                self.modules[module_name(path, root)] = path
                for folder in path.relative_to(root).parents[:-1]:
                    self.modules.setdefault(".".join(folder.parts), root / folder / "__init__.py")
        self._bound: dict[str, set[str] | None] = {}
        self._imports: dict[Path, list[Import]] = {}

    def _names_submodule(self, package: str, name: str) -> bool:
        """Whether ``from package import name`` imports a submodule: one of the
        tree, or one it does not hold as source (a compiled extension, generated
        code), seen as a name the package's ``__init__.py`` does not bind."""
        if f"{package}.{name}" in self.modules:
            return True
        init = self.modules.get(package)
        if init is None or init.name != "__init__.py" or not init.is_file():
            return False
        if package not in self._bound:
            self._bound[package] = _bound_names(init)
        bound = self._bound[package]
        return bound is not None and name not in bound

    def imports_of(self, path: Path) -> list[Import]:
        """Every module ``path`` imports (absolute names, in file order), with
        its line; relative imports are resolved against the file's package, and
        ``from p import n`` names ``p.n`` when that is a submodule, else ``p``."""
        if path in self._imports:
            return self._imports[path]
        package = ".".join(path.relative_to(self.root).parts[:-1])
        tree = ast.parse(path.read_text(), filename=str(path))
        found = self._imports[path] = []
        for node, typing_only in _statements(tree):
            if isinstance(node, ast.Import):
                found += [Import(node.lineno, alias.name, typing_only) for alias in node.names]
                continue
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names = {f"{base}.{alias.name}" if self._names_submodule(base, alias.name) else base
                     for alias in node.names}
            found += [Import(node.lineno, name, typing_only) for name in sorted(names)]
        return found

    def graph(self) -> dict[str, dict[str, Import]]:
        """Module → {module of the tree it imports at run time → the first such
        import}; typing-only imports and a module naming itself are left out.
        Importing ``a.b.c`` runs ``a`` and ``a.b`` first, but a parent package
        is no edge: Python finds it half-imported and goes on, so only the
        modules a statement names are."""
        graph: dict[str, dict[str, Import]] = {}
        for module, path in self.modules.items():
            edges = graph.setdefault(module, {})
            if path.is_file():
                for found in self.imports_of(path):
                    if found.name in self.modules and found.name != module and not found.typing_only:
                        edges.setdefault(found.name, found)
        return graph

    def describe(self, graph: dict[str, dict[str, Import]], circle: list[str]) -> str:
        """``a → b → a`` and, for each step, the file and line of its import."""
        steps = [f"  {self.modules[a].relative_to(self.root)}:{graph[a][b].line} imports {b}"
                 for a, b in zip(circle, circle[1:])]
        return " → ".join(circle) + "\n" + "\n".join(steps)


def _strongly_connected(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Tarjan's strongly connected sets, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(sorted(graph[start])))]
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while not members or members[-1] != node:
                        members.append(stack.pop())
                        on_stack.discard(members[-1])
                    found.append(sorted(members))
            elif successor not in index:
                index[successor] = low[successor] = len(index)
                stack.append(successor)
                on_stack.add(successor)
                work.append((successor, iter(sorted(graph[successor]))))
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
    return found


def _shortest_circle(graph: dict[str, dict[str, Import]], members: list[str]) -> list[str]:
    """The shortest way from the first of ``members`` back to it, inside ``members``."""
    start, inside = members[0], set(members)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for successor in sorted(graph[node]):
            if successor == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if successor in inside and successor not in came_from:
                came_from[successor] = node
                queue.append(successor)
    raise AssertionError(f"{members} do not import each other")


def circles(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """One shortest circle ``[a, b, …, a]`` per set of modules that import each
    other, directly or not (a set may hold more circles than the one shown)."""
    return [_shortest_circle(graph, members) for members in _strongly_connected(graph) if len(members) > 1]
