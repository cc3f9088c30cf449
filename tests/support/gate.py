"""A gate that holds a background index rebuild part-way, so a test can look at the world while
the rebuild is running: the fulltext, vector and server background tests share it."""

from __future__ import annotations

import threading
from typing import Any

import pytest


class Gate:
    """Holds the background rebuild after its second row until `release()`: wraps the
    per-row step `module.name` (the vector rebuild's per-batch `append_rows`, one row a batch
    when the test sets `healing.STEP_ROWS` to 1), which is where a rebuild can be paused
    without a lock held."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
        self.held = threading.Event()
        self.go = threading.Event()
        self.rows = 0
        original = getattr(module, name)

        def step(*args: Any, **kwargs: Any) -> Any:
            self.rows += 1
            if self.rows == 3:
                self.held.set()
                self.go.wait(60)
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, step)

    def release(self) -> None:
        self.go.set()
