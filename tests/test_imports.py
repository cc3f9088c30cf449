"""The package's import graph (issue 23): no module imports another that, directly or through
others, imports it back, and no two rooms are named alike.

The graph is read from the syntax tree of every module, counting imports at module level and
inside functions alike (a deferred import that closes a loop is still a loop in the design),
and leaving out those under `if TYPE_CHECKING:` (annotations only, never executed).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "cpersona"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    annotations_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node)
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in annotations_only:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from pkg import sub` imports the submodule sub, not pkg's other contents
            names = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                for alias in node.names
            ]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_package_has_no_import_cycle():
    known = _modules()
    graph = {module: set(_imported(module, path, known)) for module, path in known.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_storage_module_is_named_after_a_room_above_storage():
    """storage/ modules are named after what they store or do, not after their callers: a
    `storage/X.py` beside a package or module `X` (storage/retrieval.py and retrieval/, ...)
    made two rooms of one name (issue 23)."""
    above = {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }
    below = {p.stem for p in (PACKAGE / "storage").glob("*.py")} | {
        p.name for p in (PACKAGE / "storage").iterdir() if (p / "__init__.py").exists()
    }
    assert below & above - {"__init__"} == set()


def test_the_package_root_holds_no_subcommand():
    """The subcommands live in commands/; the root keeps `checkup` and `proxy_stdio` only as
    the `python -m` entry points the contract names, each a few lines over its command."""
    for entry in ("checkup", "proxy_stdio"):
        text = (PACKAGE / f"{entry}.py").read_text(encoding="utf-8")
        assert "from cpersona.commands." in text
        assert len(text.splitlines()) <= 15
    for command in ("bundle", "migrate", "reembed", "policy"):
        assert not (PACKAGE / f"{command}.py").exists()
        assert (PACKAGE / "commands" / f"{command}.py").exists()
