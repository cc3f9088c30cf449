"""The building blocks of the tool-call fuzzers (tests/server, tests/portability): JSON values
of any shape and whole tool calls drawn from a table of each tool's argument names. Each fuzzer
brings its own texts and per-argument strategies, which is where they differ."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Keys cannot hold lone surrogates: the MCP client itself refuses to serialise them.
keys = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)


def texts(size: int, samples: Sequence[str]) -> st.SearchStrategy[str]:
    """Any text up to `size` characters, or one of `samples`: the values a tool treats
    specially, which random text would seldom hit."""
    return st.one_of(st.text(max_size=size), st.sampled_from(list(samples)))


def json_values(
    scalars: st.SearchStrategy[Any], *, size: int, leaves: int
) -> st.SearchStrategy[Any]:
    """Scalars nested in lists and objects, `size` items to a level, `leaves` scalars in all."""
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=size), st.dictionaries(keys, inner, max_size=size)
        ),
        max_leaves=leaves,
    )


def calls(
    tool_args: Mapping[str, Sequence[str]],
    argument: Callable[[str], st.SearchStrategy[Any]],
    extra: st.SearchStrategy[Any],
) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """A tool and its arguments: each named argument mostly present, sometimes missing, plus a
    few unknown keys whose values `extra` draws."""

    @st.composite
    def call(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
        tool = draw(st.sampled_from(sorted(tool_args)))
        args = {}
        for name in tool_args[tool]:
            if draw(st.integers(0, 9)) < 8:
                args[name] = draw(argument(name))
        args.update(draw(st.dictionaries(keys, extra, max_size=2)))
        return tool, args

    return call()


def batches(
    call: st.SearchStrategy[tuple[str, dict[str, Any]]], *, examples: int
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The fuzzers' decorator: `examples` batches of one to eight calls drawn from `call`, on
    the test's function-scoped engine (each batch runs against what the earlier left)."""

    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        return settings(
            max_examples=examples,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )(given(batch=st.lists(call, min_size=1, max_size=8))(test))

    return decorate


def assert_intact(path: Path) -> None:
    """What the fuzzing left behind is still a sound SQLite database."""
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
