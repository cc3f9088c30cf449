"""cpersona: persistent memory for LLM agents, served over MCP.

Importing the package has no side effects: no files are opened and no model is loaded.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cpersona")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
