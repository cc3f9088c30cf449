"""What the portability services need from the process that runs them.

The Engine satisfies this structurally; portability/ never imports it (the Engine sits above
the services it wires). Tests may pass any object with these members.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cpersona.config import Settings
    from cpersona.embedding.cache import CachedProvider
    from cpersona.embedding.routing import ModelRouter
    from cpersona.retrieval.calibration import Calibrator
    from cpersona.storage import Store
    from cpersona.vectors.remote import RemoteVectors


class Host(Protocol):
    """The database, settings and services an export, import, merge or deletion uses."""

    @property
    def db(self) -> Store: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def remote(self) -> RemoteVectors | None: ...

    @property
    def calibrator(self) -> Calibrator: ...

    @property
    def embedder(self) -> CachedProvider: ...

    @property
    def router(self) -> ModelRouter: ...

    def after_write(self) -> None:
        """Bring the derived indexes current after a committed write."""
