"""The log's rate limit (logs.RateLimit): a repeated failure is logged a few times per window,
then counted; different kinds never hide each other; DEBUG is never limited."""

from __future__ import annotations

import logging
import sys

from cpersona.logs import OneLine, RateLimit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(
    msg: str, *args: object, level: int = logging.WARNING, name: str = "x"
) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_repeated_record_passes_burst_times_per_window_then_is_counted():
    clock = Clock()
    limit = RateLimit(burst=3, window=60.0, clock=clock)
    passed = [limit.filter(record("client %s hung up", i)) for i in range(100)]
    assert passed == [True] * 3 + [False] * 97
    clock.now += 60.0
    summary = record("client %s hung up", 100)
    assert limit.filter(summary)
    assert summary.getMessage() == (
        "client 100 hung up (97 more like this in the previous 60 s not logged)"
    )
    assert [limit.filter(record("client %s hung up", i)) for i in range(3)] == [True, True, False]


def test_kinds_are_limited_apart_and_debug_is_not_limited():
    limit = RateLimit(burst=1, window=60.0, clock=Clock())
    assert limit.filter(record("a %s", 1))
    assert not limit.filter(record("a %s", 2))  # numbers do not make a kind
    assert limit.filter(record("a %s", "expired"))  # words do
    assert limit.filter(record("b %s", 1))  # another template
    assert limit.filter(record("a %s", 1, name="y"))  # another logger
    assert limit.filter(record("a %s", 1, level=logging.ERROR))  # another level
    assert all(limit.filter(record("a %s", i, level=logging.DEBUG)) for i in range(50))


def test_kinds_remembered_are_bounded():
    """Messages naming different things are each a kind of their own: the oldest are forgotten
    (and so pass again) rather than kept forever."""

    def word(i: int) -> str:
        return "".join("abcdefghij"[int(d)] for d in str(i))

    limit = RateLimit(burst=1, window=60.0, clock=Clock())
    assert limit.filter(record("agent %s", word(0)))
    assert not limit.filter(record("agent %s", word(0)))
    for i in range(1, 5000):
        assert limit.filter(record("agent %s", word(i)))
    assert limit.filter(record("agent %s", word(0)))


def test_a_failed_accept_is_logged_as_one_line():
    """asyncio's record of accept() out of descriptors: its message, context and error text on
    one line, no traceback; other records keep theirs."""
    one_line = OneLine("socket.accept() out of system resource")
    try:
        raise OSError(24, "Too many open files")
    except OSError:
        failed = logging.LogRecord(
            "asyncio", logging.ERROR, __file__, 1,
            "socket.accept() out of system resource\nsocket: <fd=3>", None, sys.exc_info(),
        )  # fmt: skip
        other = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom", None, sys.exc_info())
    assert one_line.filter(failed) and one_line.filter(other)
    text = logging.Formatter().format(failed)
    assert text == (
        "socket.accept() out of system resource; socket: <fd=3>: [Errno 24] Too many open files"
    )
    assert "Traceback" in logging.Formatter().format(other)
