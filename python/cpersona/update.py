"""`check_update`: this package's version, and a release check only when asked (surface.md §13.4).

cpersona looks nothing up unless `CPERSONA_UPDATE_CHECK=true` (docs/compatibility.md). Then it
reads the PyPI simple index (PEP 691 JSON; 3 s, at most 1 MiB) on `refresh=true` or when the
cached verdict (`update-check.json` beside the database) is older than
`CPERSONA_UPDATE_CHECK_INTERVAL_SECONDS`. It never installs anything by itself; `apply=true`
runs the detected install command (an argv, never a shell) only while checks are enabled and a
newer release is known.

The name `cpersona` on PyPI also belongs to the upstream CPersona project. A running version
that the index does not list is therefore reported as `unlisted`, and no release of another
line is ever offered as "newer".
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cpersona import __version__, private_files
from cpersona.config import Settings

log = logging.getLogger("cpersona.update")

INDEX_URL = "https://pypi.org/simple/cpersona/"
FETCH_TIMEOUT = 3.0
FETCH_LIMIT = 1 << 20
OUTPUT_TAIL_LINES = 40

#: The health issue a cached verdict's state raises: its type, severity and the verdict key
#: it quotes.
_VERDICT_ISSUES = {
    "newer": ("update_available", "info", "available"),
    "yanked": ("version_yanked", "warn", "reason"),
}
_FILENAME = re.compile(r"cpersona-([0-9][^-]*?)(?:\.tar\.gz|-py|\.zip|-cp)")

#: (versions listed -> {version: every file yanked}) for a test to replace the network.
Fetch = Callable[[], dict[str, bool]]
#: How this copy was installed (`install_hint`), for a test to point at another environment.
Installer = Callable[[], dict[str, Any]]


def _fetch_index() -> dict[str, bool]:
    request = urllib.request.Request(
        INDEX_URL, headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT) as response:
        body = response.read(FETCH_LIMIT + 1)
    if len(body) > FETCH_LIMIT:
        raise ValueError("the index answer is larger than 1 MiB")
    files = json.loads(body).get("files", [])
    versions: dict[str, bool] = {}
    for f in files:
        match = _FILENAME.match(f.get("filename", ""))
        if match:
            v = match.group(1)
            versions[v] = versions.get(v, True) and bool(f.get("yanked"))
    return versions


def _key(version: str) -> tuple[tuple[int, ...], bool]:
    """A sort key: numeric release parts, then final after pre-release."""
    nums = tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:4])
    final = re.search(r"(a|b|rc|dev)\d*", version) is None
    return nums, final


def install_hint(executable: str | None = None, module: Path | None = None) -> dict[str, Any]:
    """How this copy was installed, and the command that would upgrade it.

    `executable` and `module` default to the running interpreter and this file; a test names
    another environment's to see the command it would get there.
    """
    prefix = Path(sys.prefix) if executable is None else Path(executable).parent.parent
    executable = executable or sys.executable
    here = (module or Path(__file__)).resolve()
    for parent in here.parents:
        if (parent / ".git").exists() and (parent / "pyproject.toml").exists():
            command = ["git", "-C", str(parent), "pull", "--ff-only"]
            return {
                "method": "checkout",
                "command": command,
                "note": "a source checkout: pull, then rebuild (maturin develop)",
                "restart_required": True,
            }
    if "uv" in prefix.parts and "tools" in prefix.parts:
        return {
            "method": "uvx",
            "command": ["uvx", "cpersona@latest"],
            "note": "uvx runs the newest release on the next start",
            "restart_required": True,
        }
    return {
        "method": "pip",
        "command": [executable, "-m", "pip", "install", "--upgrade", "cpersona"],
        "note": "installs into this interpreter's environment",
        "restart_required": True,
    }


class UpdateCheck:
    """The verdict about the running version, cached beside the database."""

    def __init__(self, settings: Settings, fetch: Fetch | None = None) -> None:
        self.settings = settings
        self.enabled = settings.update_check
        self.fetch = fetch or _fetch_index
        self.installer: Installer = install_hint
        db = settings.db_path
        self.cache = None if db == ":memory:" else Path(db).resolve().parent / "update-check.json"
        self._told: set[str] = set()

    def _read_cache(self) -> dict[str, Any] | None:
        if self.cache is None:
            return None
        try:
            data = json.loads(self.cache.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("running") != __version__:
            return None
        return data

    def _write_cache(self, data: dict[str, Any]) -> None:
        if self.cache is None:
            return
        try:
            private_files.write_atomically(self.cache, json.dumps(data), fsync=False)
        except OSError as exc:
            log.warning("could not write %s: %s", self.cache, exc)

    def _judge(self, versions: dict[str, bool]) -> dict[str, Any]:
        running = __version__
        if running not in versions:
            return {
                "state": "unlisted",
                "kind": None,
                "available": None,
                "reason": f"cpersona {running} is not on the package index; releases "
                "listed there under this name may belong to another project, so none "
                "is suggested",
            }
        finals = [v for v in versions if _key(v)[1] and not versions[v]]
        newest = max(finals, key=_key, default=None)
        if versions[running]:
            return {
                "state": "yanked",
                "kind": "yanked",
                "available": newest,
                "reason": f"every file of cpersona {running} was withdrawn from the index",
            }
        if newest is not None and _key(newest) > _key(running):
            kind = "newer" if _key(running)[1] else "prerelease_final"
            return {
                "state": "newer",
                "kind": kind,
                "available": newest,
                "reason": f"cpersona {newest} is available",
            }
        return {
            "state": "ok",
            "kind": None,
            "available": None,
            "reason": f"cpersona {running} is the newest release",
        }

    def verdict(self, refresh: bool = False) -> dict[str, Any]:
        """The current verdict; looks up the index only when enabled (and due or asked)."""
        base = {"running": __version__, "checked_at": None, "refreshed": False}
        if not self.enabled:
            return {
                **base,
                "state": "disabled",
                "kind": None,
                "available": None,
                "reason": "release checks are off (CPERSONA_UPDATE_CHECK=true turns them "
                "on); nothing was looked up",
            }
        cached = self._read_cache()
        now = datetime.now(UTC)
        if cached is not None and not refresh:
            try:
                age = (now - datetime.fromisoformat(cached["fetched_at"])).total_seconds()
            except (KeyError, TypeError, ValueError):
                age = float("inf")
            if age < self.settings.update_check_interval_seconds:
                return {**base, **cached["verdict"], "checked_at": cached["fetched_at"]}
        try:
            judged = self._judge(self.fetch())
        except Exception as exc:  # any network or format failure: no verdict, never fatal
            return {
                **base,
                "state": "unknown",
                "kind": None,
                "available": None,
                "reason": f"the release check failed: {type(exc).__name__}: {exc}",
            }
        stamp = now.isoformat(timespec="seconds")
        self._write_cache(
            {
                "fetched_at": stamp,
                "running": __version__,
                "verdict": {**judged, "running": __version__},
            }
        )
        return {**base, **judged, "checked_at": stamp, "refreshed": True}

    def report(self, refresh: bool, apply: bool) -> dict[str, Any]:
        """The `check_update` answer (no `ok` key on success)."""
        v = self.verdict(refresh and self.enabled)
        install = self.installer()
        if v.get("available") and install["method"] == "pip":
            install = {
                **install,
                "command": [*install["command"][:-1], f"cpersona=={v['available']}"],
            }
        out: dict[str, Any] = {
            "enabled": self.enabled,
            **v,
            "install": install,
            "_meta": {"server_version": __version__},
        }
        if v["state"] in ("newer", "yanked"):
            out["message"] = v["reason"]
        if apply:
            out["apply_result"] = self._apply(v, install)
        return out

    def _apply(self, v: dict[str, Any], install: dict[str, Any]) -> dict[str, Any]:
        if not self.enabled:
            return {
                "applied": False,
                "restart_required": False,
                "install": install,
                "reason": "release checks are off (CPERSONA_UPDATE_CHECK=true); nothing "
                "was installed",
            }
        if v["state"] != "newer":
            return {
                "applied": False,
                "restart_required": False,
                "install": install,
                "reason": f"no newer release is known (state {v['state']})",
            }
        if install["method"] not in ("pip", "checkout"):
            return {
                "applied": False,
                "restart_required": False,
                "install": install,
                "reason": f"cannot install automatically for method {install['method']}",
            }
        try:
            done = subprocess.run(
                install["command"], capture_output=True, text=True, timeout=600, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {
                "applied": False,
                "restart_required": False,
                "install": install,
                "reason": f"{type(exc).__name__}: {exc}",
            }
        tail = (done.stdout + done.stderr).splitlines()[-OUTPUT_TAIL_LINES:]
        return {
            "applied": done.returncode == 0,
            "exit_code": done.returncode,
            "output_tail": tail,
            "restart_required": True,
            "install": install,
        }

    def notice(self, bucket: str) -> dict[str, Any] | None:
        """The recall `update` notice: at most once per session bucket, from the cached verdict
        (never looks anything up), and only while checks are enabled."""
        if not self.enabled or bucket in self._told:
            return None
        cached = self._read_cache()
        v = cached.get("verdict", {}) if cached is not None else {}
        if v.get("kind") not in ("newer", "yanked", "prerelease_final"):
            return None
        self._told.add(bucket)
        hint = self.installer()
        return {
            "kind": v["kind"],
            "running": __version__,
            "available": v.get("available"),
            "install": {
                "method": hint["method"],
                "command": hint["command"],
                "restart_required": True,
            },
            "message": v.get("reason"),
            "reason": v.get("reason"),
        }

    def health_issues(self) -> list[dict[str, Any]]:
        """`update_available` / `version_yanked` from the cached verdict (never looks up)."""
        if not self.enabled:
            return []
        cached = self._read_cache()
        if cached is None:
            return []
        v = cached.get("verdict", {})
        issue = _VERDICT_ISSUES.get(v.get("state"))
        if issue is None:
            return []
        kind, severity, detail = issue
        return [
            {
                "type": kind,
                "severity": severity,
                "check": "update_status",
                "running": __version__,
                detail: v.get(detail),
            }
        ]
