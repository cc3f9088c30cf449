"""`cpersona-policy` (surface.md §14.1): print the packaged skill's policy block for an agent, or
install it between versioned markers: idempotent, an older block replaced in place, the rest of
the file kept, `--dry-run` writing nothing, exit 0 / 1 (skill or block missing) / 2 (usage or
refusal). The installed console script is exercised once; the rest runs `main` in-process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cpersona.commands import policy
from hypothesis import given, settings
from hypothesis import strategies as st

BEGIN = "<!-- BEGIN cpersona-policy v1 -->"
END = "<!-- END cpersona-policy -->"


def run(*argv: str, skill: Path | None = None) -> int:
    return policy.main(list(argv), skill_path=skill)


def test_print_shows_the_block_with_the_agent_id(capsys):
    assert run("--agent-id", "alice") == 0
    out = capsys.readouterr().out
    assert out.startswith(BEGIN + "\n")
    assert out.rstrip("\n").endswith(END)
    assert "Your agent id is `alice`" in out
    assert "{agent_id}" not in out


def test_the_console_script_is_installed_and_prints():
    script = Path(sys.executable).with_name("cpersona-policy")
    env = {**os.environ}
    out = subprocess.run(
        [str(script), "--agent-id", "bot-7"], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "Your agent id is `bot-7`" in out.stdout


def test_install_is_idempotent_and_keeps_the_rest_of_the_file(tmp_path):
    target = tmp_path / "CLAUDE.md"
    target.write_text("# My rules\n\nBe terse.\n", encoding="utf-8")
    assert run("--agent-id", "alice", "--install", "--target", str(target)) == 0
    first = target.read_text(encoding="utf-8")
    assert first.startswith("# My rules\n\nBe terse.\n\n" + BEGIN)
    assert first.count(BEGIN) == 1
    before = target.stat().st_mtime_ns
    assert run("--agent-id", "alice", "--install", "--target", str(target)) == 0
    assert target.read_text(encoding="utf-8") == first
    assert target.stat().st_mtime_ns == before  # not even rewritten


def test_an_older_block_is_replaced_in_place(tmp_path):
    target = tmp_path / "AGENTS.md"
    old = "<!-- BEGIN cpersona-policy v0 -->\nold advice for `bob`\n" + END
    target.write_text(f"intro\n\n{old}\n\noutro\n", encoding="utf-8")
    assert run("--agent-id", "alice", "--install", "--target", str(target)) == 0
    text = target.read_text(encoding="utf-8")
    assert text.startswith("intro\n\n" + BEGIN)
    assert text.endswith(END + "\n\noutro\n")
    assert "old advice" not in text
    assert "`alice`" in text


def test_dry_run_writes_nothing_and_says_what_would_happen(tmp_path, capsys):
    target = tmp_path / "sub" / "CLAUDE.md"
    assert run("--agent-id", "a", "--install", "--target", str(target), "--dry-run") == 0
    assert not target.exists()
    assert f"would install: {target}" in capsys.readouterr().err


def test_client_names_the_file_in_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert run("--agent-id", "a", "--install", "--client", "claude-code") == 0
    assert run("--agent-id", "a", "--install", "--client", "codex") == 0
    assert BEGIN in (tmp_path / ".claude" / "CLAUDE.md").read_text(encoding="utf-8")
    assert BEGIN in (tmp_path / ".codex" / "AGENTS.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "argv",
    [
        [],  # --agent-id is required
        ["--agent-id", "a", "--install"],  # no destination
        ["--agent-id", "a", "--install", "--client", "codex", "--target", "x.md"],
        ["--agent-id", "a", "--client", "codex"],  # a destination without --install
        ["--agent-id", "has space"],
        ["--agent-id", "tick`"],
        ["--agent-id", "a", "--install", "--client", "vim"],
    ],
    ids=["no-agent", "no-target", "both-targets", "no-install", "space", "backtick", "client"],
)
def test_usage_errors_exit_2(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        code = run(*argv)
        raise SystemExit(code)
    assert exited.value.code == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "content",
    [
        f"{BEGIN}\nno end marker\n",
        f"{BEGIN}\nx\n{END}\n{BEGIN}\ny\n{END}\n",
        f"stray {END}\n",
    ],
    ids=["no-end", "two-blocks", "stray-end"],
)
def test_a_damaged_target_is_refused_and_left_alone(tmp_path, content, capsys):
    target = tmp_path / "CLAUDE.md"
    target.write_text(content, encoding="utf-8")
    assert run("--agent-id", "a", "--install", "--target", str(target)) == 2
    assert target.read_text(encoding="utf-8") == content
    assert "fix it by hand" in capsys.readouterr().err


def test_a_missing_skill_or_block_exits_1(tmp_path, capsys):
    assert run("--agent-id", "a", skill=tmp_path / "nope.md") == 1
    assert "missing" in capsys.readouterr().err
    empty = tmp_path / "SKILL.md"
    empty.write_text("# a skill without the block\n", encoding="utf-8")
    assert run("--agent-id", "a", skill=empty) == 1
    assert "no cpersona-policy block" in capsys.readouterr().err


@settings(max_examples=60, deadline=None)
@given(
    before=st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=80),
    after=st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=80),
)
def test_installing_twice_equals_installing_once_for_any_surrounding_text(before, after):
    block = policy.policy_block("agent", policy.skill_text())
    once = policy.merged(before, block)
    assert policy.merged(once, block) == once
    assert once.count(BEGIN) == 1
    assert once.startswith(before)
    replaced = policy.merged(before + block + after, block)
    assert replaced == before + block + after


def test_install_writes_through_a_linked_file_and_keeps_the_link(tmp_path):
    dotfiles = tmp_path / "dotfiles" / "CLAUDE.md"
    dotfiles.parent.mkdir()
    dotfiles.write_text("# my notes\n", encoding="utf-8")
    link = tmp_path / ".claude" / "CLAUDE.md"
    link.parent.mkdir()
    link.symlink_to(dotfiles)
    assert run("--agent-id", "alice", "--install", "--target", str(link)) == 0
    assert link.is_symlink() and link.resolve() == dotfiles.resolve()
    text = dotfiles.read_text(encoding="utf-8")
    assert text.startswith("# my notes\n\n" + BEGIN)
    assert run("--agent-id", "alice", "--install", "--target", str(link)) == 0
    assert dotfiles.read_text(encoding="utf-8") == text
