"""The storage seam (issue 12 item 1, docs/architecture.md "Storage seam") holds: nothing
above python/cpersona/storage/ imports the SQLite driver, runs SQL, opens a connection or a
transaction, or writes SQL text; nor does it import a backend's package (storage.pg) or ask
which backend runs (`.dialect`): it asks the store's capabilities (issue 18 item 1,
docs/architecture.md "Storage interface"); tool handlers take the typed Engine; portability/
does not import the Engine it is wired by."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "cpersona"
STORAGE = PACKAGE / "storage"

#: Methods of a connection or a Database that only storage/ may call.
DRIVER_CALLS = {
    "execute",
    "executemany",
    "executescript",
    "atomic",
    "reader",
    "write_connection",
    "query_one",
}
#: The backends' own packages under storage/: only storage/ may import them.
BACKEND_PACKAGES = ("cpersona.storage.pg",)
#: `.query(` is also the model router's (`router.query()`): only a database's is refused.
DB_NAMES = {"db", "_db", "database"}
SQL_TEXT = re.compile(
    r"^\s*(SELECT\s.+\sFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM"
    r"|PRAGMA\s|CREATE\s+(TABLE|INDEX|TRIGGER|UNIQUE)|DROP\s+(TABLE|INDEX|TRIGGER)"
    r"|BEGIN(\s+IMMEDIATE)?\s*$)",
    re.IGNORECASE | re.DOTALL,
)
#: path relative to python/cpersona -> {what: why}. Empty today; an entry needs a reason.
ALLOWED: dict[str, dict[str, str]] = {}


def _receiver(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _backend_module(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in BACKEND_PACKAGES)


def violations(source: str) -> list[str]:
    """What in `source` (a module above storage/) crosses the seam, one line each."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [f"import {a.name}" for a in node.names if a.name.split(".")[0] == "sqlite3"]
            out += [f"import {a.name}" for a in node.names if _backend_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlite3":
            out.append(f"from {node.module} import")
        elif isinstance(node, ast.ImportFrom) and (
            _backend_module(node.module or "")
            or any(_backend_module(f"{node.module}.{a.name}") for a in node.names)
        ):
            out.append(f"from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Attribute) and node.attr == "dialect":
            out.append(".dialect")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in DRIVER_CALLS or (name == "query" and _receiver(node.func.value) in DB_NAMES):
                out.append(f".{name}(")
        elif isinstance(node, ast.Attribute) and node.attr == "in_transaction":
            out.append(".in_transaction")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and SQL_TEXT.match(node.value)
        ):
            out.append(f"SQL text {node.value[:40]!r}")
    return out


def _above_storage() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if STORAGE not in p.parents]


def test_the_checker_sees_each_kind_of_crossing() -> None:
    bad = (
        "import sqlite3\n"
        "from sqlite3 import Row\n"
        "def f(engine, conn):\n"
        "    with engine.db.atomic() as c:\n"
        "        c.execute('UPDATE memories SET locked = 1')\n"
        "    engine.db.query('x')\n"
        "    return conn.in_transaction, engine.db.reader()\n"
    )
    found = violations(bad)
    for expected in ("import sqlite3", "from sqlite3 import", ".atomic(", ".execute(", ".query("):
        assert expected in found
    assert ".in_transaction" in found and ".reader(" in found
    assert any(v.startswith("SQL text") for v in found)
    assert violations("router.query()\nx = 'Select the best rows'\n") == []


def test_the_checker_sees_a_backend_asked_for() -> None:
    bad = (
        "import cpersona.storage.pg.db\n"
        "from cpersona.storage.pg import vectors\n"
        "from cpersona.storage.pg.db import redact\n"
        "from cpersona.storage import pg\n"
        "local = engine.db.dialect == 'sqlite'\n"
    )
    assert violations(bad) == [
        "import cpersona.storage.pg.db",
        "from cpersona.storage.pg import vectors",
        "from cpersona.storage.pg.db import redact",
        "from cpersona.storage import pg",
        ".dialect",
    ]
    fine = (
        "from cpersona.storage import database_scan, embeddings\n"
        "from cpersona.storage.pgx import y\n"
        "local = engine.db.capabilities.vector_arm == 'index_file'\n"
    )
    assert violations(fine) == []


@pytest.mark.parametrize("path", _above_storage(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_driver_or_sql_above_storage(path: Path) -> None:
    rel = str(path.relative_to(PACKAGE))
    allowed = ALLOWED.get(rel, {})
    found = [v for v in violations(path.read_text(encoding="utf-8")) if v not in allowed]
    assert found == [], f"{rel} crosses the storage seam: {found}"


def test_tool_handlers_take_the_engine() -> None:
    untyped = []
    for path in sorted((PACKAGE / "server" / "tools").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            for arg in node.args.args:
                if arg.arg == "engine" and ast.unparse(arg.annotation or ast.Name("")) != "Engine":
                    untyped.append(f"{path.name}:{node.name}")
    assert untyped == []


def test_portability_does_not_import_the_engine() -> None:
    importing = []
    for path in sorted((PACKAGE / "portability").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "cpersona.engine":
                importing.append(path.name)
    assert importing == []
