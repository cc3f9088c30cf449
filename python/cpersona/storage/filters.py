"""SQL conditions rendered from the plain filter values of cpersona.models, which say what a
read admits and know nothing of SQL (tests/test_seam.py: no SQL above storage/)."""

from __future__ import annotations

from cpersona.models import ProjectFilter

__all__ = ["project_where", "scope_where"]


def project_where(
    project: ProjectFilter, column: str = "project_id"
) -> tuple[str, tuple[str, ...]]:
    """The condition on `column` that admits the rows `project` admits (surface.md §6.1: any
    project, the global rows only, or one project's rows and the global ones), and its
    parameters."""
    if project.value is None:
        return "TRUE", ()
    if project.value == "":
        return f"{column} = ''", ()
    return f"{column} IN (?, '')", (project.value,)


def scope_where(
    agent_id: str, project: ProjectFilter, channel: str
) -> tuple[list[str], list[object]]:
    """The conditions (to be joined by AND) that admit one agent's rows in `project` and
    `channel` (a channel admits its own rows and the unchannelled ones), and their parameters
    in order."""
    where, pp = project_where(project)
    parts = ["agent_id = ?", where]
    params: list[object] = [agent_id, *pp]
    if channel:
        parts.append("channel IN (?, '')")
        params.append(channel)
    return parts, params
