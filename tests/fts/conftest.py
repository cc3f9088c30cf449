"""Fixtures of the full-text index tests."""

from __future__ import annotations

import pytest
from fts_support import HAS_CORE

if not HAS_CORE:
    pytest.skip("the full-text index needs the Rust core", allow_module_level=True)
