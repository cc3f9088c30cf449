"""What an import or a merge tells its caller it copied: the memories and episodes it wrote
and those it skipped as duplicates, under the tool's verb ("imported", "merged")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Copied:
    """Rows written and skipped by one import or merge, counted as its rules decide them."""

    memories: int = 0
    skipped_memories: int = 0
    episodes: int = 0
    skipped_episodes: int = 0

    def fields(self, verb: str, *, rolled_back: bool = False) -> dict[str, int]:
        """The response's four counts in its key order; a run rolled back wrote nothing, and
        still says what it skipped before it stopped."""
        return {
            f"{verb}_memories": 0 if rolled_back else self.memories,
            "skipped_memories": self.skipped_memories,
            f"{verb}_episodes": 0 if rolled_back else self.episodes,
            "skipped_episodes": self.skipped_episodes,
        }

    def logged(self) -> tuple[int, int, int, int]:
        """(written, skipped) memories then episodes, for the log line."""
        return self.memories, self.skipped_memories, self.episodes, self.skipped_episodes
