"""`cpersona-policy`: the memory-policy block of the packaged agent skill, printed or installed.

surface.md §14.1: `cpersona-policy --agent-id ID [--install] [--client claude-code|codex |
--target FILE] [--dry-run]`. The block is the part of `skills/cpersona-memory/SKILL.md` between
`<!-- BEGIN cpersona-policy vN -->` and `<!-- END cpersona-policy -->`, with the agent id filled
in. Installing writes it between the same markers in the client's instructions file: a second
install changes nothing, an older or edited block is replaced in place, and every other line of
the file is kept. Exit codes: 0 done, 1 the skill or its block is missing, 2 usage or refusal.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

SKILL = ("skills", "cpersona-memory", "SKILL.md")
CLIENT_FILES = {"claude-code": (".claude", "CLAUDE.md"), "codex": (".codex", "AGENTS.md")}
END = "<!-- END cpersona-policy -->"
_BLOCK = re.compile(
    r"<!-- BEGIN cpersona-policy v(?P<version>\d+) -->\n.*?" + re.escape(END), re.DOTALL
)
_BEGIN_ANY = re.compile(r"<!-- BEGIN cpersona-policy v\d+ -->")
#: An id that goes into Markdown verbatim: no line breaks, no backticks, no marker text.
_AGENT_ID = re.compile(r"^[^\s`<>]{1,128}$")

OK, MISSING, REFUSED = 0, 1, 2


class PolicyError(Exception):
    """A refusal: `code` is the exit status, the message says what to do."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Outcome:
    target: Path
    action: str  # "installed", "replaced", "unchanged"
    text: str


def skill_text(path: Path | None = None) -> str:
    try:
        if path is not None:
            return path.read_text(encoding="utf-8")
        return resources.files("cpersona").joinpath(*SKILL).read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        where = path or "/".join(SKILL)
        raise PolicyError(
            f"the agent skill {where} is missing; reinstall cpersona", MISSING
        ) from None


def policy_block(agent_id: str, skill: str) -> str:
    """The skill's policy block, markers included, for `agent_id`."""
    if not _AGENT_ID.match(agent_id):
        raise PolicyError(
            f"--agent-id {agent_id!r} is not usable: 1-128 characters without spaces, "
            "backticks or angle brackets",
            REFUSED,
        )
    found = _BLOCK.search(skill)
    if found is None:
        raise PolicyError("the agent skill holds no cpersona-policy block; reinstall", MISSING)
    return found.group(0).replace("{agent_id}", agent_id)


def merged(current: str, block: str) -> str:
    """`current` with `block` in place of its cpersona-policy block, or appended."""
    begins = len(_BEGIN_ANY.findall(current))
    blocks = list(_BLOCK.finditer(current))
    if begins != len(blocks) or current.count(END) != len(blocks) or len(blocks) > 1:
        raise PolicyError(
            "the target holds a damaged or repeated cpersona-policy block (a BEGIN without "
            "its END, or two blocks); fix it by hand, then install again",
            REFUSED,
        )
    if blocks:
        old = blocks[0]
        return current[: old.start()] + block + current[old.end() :]
    if not current:
        return block + "\n"
    # One blank line between the user's text and the block.
    if current.endswith("\n\n"):
        separator = ""
    elif current.endswith("\n"):
        separator = "\n"
    else:
        separator = "\n\n"
    return current + separator + block + "\n"


def install(target: Path, block: str, *, dry_run: bool) -> Outcome:
    if target.is_dir():
        raise PolicyError(f"--target {target} is a directory; name a file", REFUSED)
    try:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
    except (UnicodeDecodeError, PermissionError) as exc:
        raise PolicyError(f"cannot read {target}: {exc}", REFUSED) from None
    text = merged(current, block)
    if text == current:
        return Outcome(target, "unchanged", text)
    action = "replaced" if _BLOCK.search(current) else "installed"
    if not dry_run:
        # Through a link to the file it names: a CLAUDE.md linked into a dotfiles checkout
        # must stay a link (the rename below would otherwise put a plain file in its place).
        _write_atomically(target.resolve(), text)
    return Outcome(target, action, text)


def _write_atomically(target: Path, text: str) -> None:
    # A crash mid-write must leave the user's file as it was: write beside it, then rename.
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cpersona-policy",
        description="Print the cpersona memory-policy block for an agent, or install it into a "
        "client's instructions file between versioned markers (idempotent).",
    )
    parser.add_argument("--agent-id", required=True, help="the agent id the policy names")
    parser.add_argument("--install", action="store_true", help="write the block into a file")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--client",
        choices=sorted(CLIENT_FILES),
        help="install into ~/.claude/CLAUDE.md (claude-code) or ~/.codex/AGENTS.md (codex)",
    )
    where.add_argument("--target", type=Path, help="install into this file")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="with --install: say what would change, write nothing",
    )
    return parser


def main(argv: Sequence[str] | None = None, *, skill_path: Path | None = None) -> int:
    args = _parser().parse_args(argv)  # usage errors exit 2
    try:
        block = policy_block(args.agent_id, skill_text(skill_path))
        if not args.install:
            if args.client or args.target or args.dry_run:
                raise PolicyError("--client, --target and --dry-run need --install", REFUSED)
            print(block)
            return OK
        if args.target is not None:
            target = args.target
        elif args.client is not None:
            target = Path.home().joinpath(*CLIENT_FILES[args.client])
        else:
            raise PolicyError(
                "--install needs --client claude-code|codex or --target FILE", REFUSED
            )
        outcome = install(target, block, dry_run=args.dry_run)
    except PolicyError as exc:
        print(f"cpersona-policy: {exc}", file=sys.stderr)
        return exc.code
    except OSError as exc:
        print(f"cpersona-policy: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return REFUSED
    verb = {"installed": "would install", "replaced": "would replace", "unchanged": "unchanged"}
    said = verb[outcome.action] if args.dry_run else outcome.action
    print(f"cpersona-policy: {said}: {outcome.target}", file=sys.stderr)
    return OK


if __name__ == "__main__":
    sys.exit(main())
