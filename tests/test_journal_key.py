"""Where the outage journal's signing key lives: never in the journal directory, so a copy of the journals does
not carry what forges their lines; `MEMORY_JOURNAL_KEY` or a 0600 file in another directory, and the key file
an earlier version kept beside the journals moved there on first use."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path
from uuid import UUID

import pytest

from memory_plugin.errors import InvalidMemoryInputError
from memory_plugin.outage import WriteJournal
from memory_plugin.quality.rules import WriteRules
from memory_plugin.rows import MemoryItem

A = UUID("00000000-0000-4000-8000-00000000000a")
RULES = WriteRules(reinforcement_step=0.1)


def item(content: str) -> MemoryItem:
    return MemoryItem(kind="fact", category="preference", content=content, content_hash=f"h-{content}")


def contents(journal: WriteJournal) -> list[list[str]]:
    return [[i.content for i in e.items] for e in journal.entries()]


def test_a_copy_of_the_journal_directory_does_not_carry_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_JOURNAL_KEY_DIR", str(tmp_path / "config"))
    journal = WriteJournal(tmp_path / "data" / "journal" / "writes-abc.jsonl")
    journal.append(A, [item("Prefiere latón")], RULES)
    assert journal.key_path == tmp_path / "config" / "journal.key"
    assert stat.S_IMODE(journal.key_path.stat().st_mode) == 0o600
    assert not any("key" in p.name for p in journal.path.parent.iterdir())

    # Whoever copies the data directory gets journals whose lines they cannot sign.
    shutil.copytree(tmp_path / "data", tmp_path / "copy")
    monkeypatch.setenv("MEMORY_JOURNAL_KEY_DIR", str(tmp_path / "elsewhere"))
    copied = WriteJournal(tmp_path / "copy" / "journal" / "writes-abc.jsonl")
    assert copied.entries() == []
    monkeypatch.setenv("MEMORY_JOURNAL_KEY_DIR", str(tmp_path / "config"))
    assert contents(WriteJournal(journal.path)) == [["Prefiere latón"]]


def test_the_key_can_come_from_the_environment_and_no_file_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_JOURNAL_KEY_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MEMORY_JOURNAL_KEY", "ab" * 32)
    journal = WriteJournal(tmp_path / "journal" / "writes-abc.jsonl")
    journal.append(A, [item("Prefiere latón")], RULES)
    assert not (tmp_path / "config").exists()
    assert contents(WriteJournal(journal.path)) == [["Prefiere latón"]]
    monkeypatch.setenv("MEMORY_JOURNAL_KEY", "cd" * 32)  # another key: the lines are set aside, not replayed
    assert WriteJournal(journal.path).entries() == []

    monkeypatch.setenv("MEMORY_JOURNAL_KEY", "not hex")
    with pytest.raises(InvalidMemoryInputError, match="MEMORY_JOURNAL_KEY must be 64 hex digits"):
        WriteJournal(journal.path).append(A, [item("Prefiere oro")], RULES)


def test_the_key_file_beside_the_journals_moves_out_on_first_use_and_old_lines_stay_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal" / "writes-abc.jsonl"
    old = WriteJournal(path, key_path=path.parent / "journal.key")  # the layout of earlier versions
    old.append(A, [item("Prefiere latón")], RULES)
    key = old.key_path.read_bytes()

    monkeypatch.setenv("MEMORY_JOURNAL_KEY_DIR", str(tmp_path / "config"))
    journal = WriteJournal(path)
    assert contents(journal) == [["Prefiere latón"]]
    assert not (path.parent / "journal.key").exists()
    assert journal.key_path.read_bytes() == key
    assert stat.S_IMODE(journal.key_path.stat().st_mode) == 0o600
    journal.append(A, [item("Prefiere plata")], RULES)
    assert contents(WriteJournal(path)) == [["Prefiere latón"], ["Prefiere plata"]]
