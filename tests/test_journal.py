"""The outage journal file (`WriteJournal`): signed lines, bad lines set aside instead of stopping start-up,
forged entries refused, and forgets and erases that win over older pending writes. No database: the
replay through `ResilientStore` is in tests/test_resilience.py."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from memory_plugin.outage import WriteJournal
from memory_plugin.quality.rules import WriteRules
from memory_plugin.rows import MemoryItem

A = UUID("00000000-0000-4000-8000-00000000000a")
B = UUID("00000000-0000-4000-8000-00000000000b")
RULES = WriteRules(reinforcement_step=0.1)


def item(content: str) -> MemoryItem:
    return MemoryItem(kind="fact", category="preference", content=content, content_hash=f"h-{content}")


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WriteJournal:
    monkeypatch.setenv("MEMORY_JOURNAL_KEY_DIR", str(tmp_path / "keys"))
    return WriteJournal(tmp_path / "journal" / "writes-abc.jsonl")


def append_line(to: WriteJournal | Path, line: bytes) -> None:
    with (to.path if isinstance(to, WriteJournal) else to).open("ab") as f:
        f.write(line + b"\n")


def contents(journal: WriteJournal) -> list[list[str]]:
    return [[i.content for i in e.items] for e in journal.entries()]


def test_lines_are_signed_with_a_private_key_created_on_first_use(journal: WriteJournal) -> None:
    assert not journal.key_path.exists()
    entry = journal.append(A, [item("Prefiere latón")], RULES)
    assert stat.S_IMODE(journal.key_path.stat().st_mode) == 0o600
    assert len(journal.key_path.read_bytes()) == 32
    (line,) = journal.path.read_text(encoding="utf-8").splitlines()
    fields = json.loads(line)  # still one JSON object per line, the signature its last field
    assert list(fields)[-1] == "mac"
    assert fields["write_id"] == str(entry.write_id)
    # Another process of the same installation (same key file) reads it.
    assert contents(WriteJournal(journal.path)) == [["Prefiere latón"]]


def test_bad_lines_are_set_aside_with_a_warning_and_the_good_entries_stay_in_order(
    journal: WriteJournal, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = journal.append(A, [item("Prefiere latón")], RULES)
    shapes = {
        "items that are not objects": {
            "write_id": str(uuid4()),
            "user_id": str(A),
            "reinforcement_step": 0.1,
            "items": [1],
        },
        "a list": [1, 2, 3],
        "a string": "hola",
        "items that are not a list": {
            "write_id": str(uuid4()),
            "user_id": str(A),
            "reinforcement_step": 0.1,
            "items": 7,
        },
    }
    for shape in shapes.values():  # objects signed as this journal signs: well-formed JSON of the wrong shape
        text = json.dumps(shape)
        append_line(journal, (journal._sign(text) if isinstance(shape, dict) else text).encode())
    append_line(journal, b"[" * 100_000)  # RecursionError in json.loads
    append_line(journal, b"\xff\xfe not utf-8")
    second = journal.append(A, [item("Prefiere bronce")], RULES)
    good = journal.path.read_bytes().splitlines()
    bad_count = len(shapes) + 2

    with caplog.at_level(logging.WARNING, logger="memory_plugin"):
        assert [e.write_id for e in journal.entries()] == [first.write_id, second.write_id]
    assert len([r for r in caplog.records if "not replayed" in r.getMessage()]) == bad_count
    assert journal.path.read_bytes().splitlines() == [good[0], good[-1]]  # set aside once, not on every read
    rejected = journal.rejected_path.read_bytes().splitlines()
    assert len(rejected) == bad_count
    assert b"[" * 100_000 in rejected
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memory_plugin"):
        assert len(journal.entries()) == 2
    assert caplog.records == []


def test_a_forged_entry_for_another_user_is_refused(journal: WriteJournal, tmp_path: Path) -> None:
    journal.append(A, [item("Prefiere latón")], RULES)
    (genuine,) = journal.path.read_bytes().splitlines()
    # Changing the user of a signed line breaks its signature.
    append_line(journal, genuine.replace(str(A).encode(), str(B).encode()))
    # An unsigned entry (what anyone able to write the file could add).
    forged = journal.append(B, [item("Presupuesto máximo 1 euro")], RULES)
    journal.remove([forged.write_id])
    append_line(journal, forged.to_json().encode())
    # An entry signed by another installation's key.
    elsewhere = WriteJournal(tmp_path / "other" / "writes-abc.jsonl", key_path=tmp_path / "other-key")
    elsewhere.append(B, [item("Prefiere oro")], RULES)
    append_line(journal, elsewhere.path.read_bytes().strip())
    # An entry of this installation moved from another database's journal.
    sibling = WriteJournal(journal.path.with_name("writes-def.jsonl"))
    sibling.append(B, [item("Prefiere plata")], RULES)
    append_line(journal, sibling.path.read_bytes().strip())

    assert [(e.user_id, [i.content for i in e.items]) for e in journal.entries()] == [(A, ["Prefiere latón"])]
    assert len(journal.rejected_path.read_bytes().splitlines()) == 4


def test_a_key_of_the_wrong_size_is_replaced_and_its_entries_refused_not_lost(journal: WriteJournal) -> None:
    journal.append(A, [item("Prefiere latón")], RULES)
    journal.key_path.write_bytes(b"short")
    again = WriteJournal(journal.path)
    assert again.entries() == []
    assert len(again.key_path.read_bytes()) == 32
    assert b"Prefiere lat" in again.rejected_path.read_bytes()
    assert any(p.name.startswith("journal.key.invalid-") for p in journal.key_path.parent.iterdir())


def test_a_forget_cancels_the_older_pending_writes_of_that_memory(journal: WriteJournal) -> None:
    only = journal.append(A, [item("Prefiere latón")], RULES)
    both = journal.append(A, [item("Prefiere bronce"), item("Prefiere latón")], RULES)
    other_user = journal.append(B, [item("Prefiere latón")], RULES)
    provisional = journal.append(A, [item("Prefiere zinc")], RULES)

    cancelled = journal.cancel_pending(A, content_hashes={"h-Prefiere latón"})
    assert (cancelled.items, cancelled.dropped) == (2, (only.write_id,))
    cancelled = journal.cancel_pending(A, memory_ids={provisional.record_id(provisional.items[0])})
    assert (cancelled.items, cancelled.dropped) == (1, (provisional.write_id,))

    later = journal.append(A, [item("Prefiere latón")], RULES)  # said again after the forget: a new write
    reread = WriteJournal(journal.path)  # the rewritten entry is signed anew
    assert [(e.write_id, e.user_id, [i.content for i in e.items]) for e in reread.entries()] == [
        (both.write_id, A, ["Prefiere bronce"]),
        (other_user.write_id, B, ["Prefiere latón"]),
        (later.write_id, A, ["Prefiere latón"]),
    ]
    assert not reread.rejected_path.exists()
    assert journal.cancel_pending(A, content_hashes={"h-nothing"}).items == 0


def test_an_erase_drops_every_pending_write_of_the_user_and_their_rejected_lines(journal: WriteJournal) -> None:
    mine = [journal.append(A, [item(f"Prefiere metal {i}")], RULES) for i in range(3)]
    theirs = journal.append(B, [item("Prefiere latón")], RULES)
    journal.reject(mine[0], "refused by the database")
    journal.reject(theirs, "refused by the database")
    append_line(journal.rejected_path, b'{"user_id": "' + str(A).encode() + b'", "truncated')  # unreadable, A's

    dropped = journal.drop_user(A)
    assert (dropped.items, set(dropped.dropped)) == (3, {e.write_id for e in mine})
    assert [e.write_id for e in journal.entries()] == [theirs.write_id]
    rejected = journal.rejected_path.read_text(encoding="utf-8")
    assert str(A) not in rejected
    assert json.loads(rejected)["write_id"] == str(theirs.write_id)


def test_the_rejected_file_of_refused_entries_can_be_renamed_and_replayed(journal: WriteJournal) -> None:
    entry = journal.append(A, [item("Prefiere latón")], RULES)
    journal.reject(entry, "refused")
    journal.remove([entry.write_id])
    os.replace(journal.rejected_path, journal.path)
    assert [e.write_id for e in journal.entries()] == [entry.write_id]


def test_unsigned_entries_an_operator_reviewed_are_readmitted_signed(
    journal: WriteJournal, caplog: pytest.LogCaptureFixture
) -> None:
    # A journal written before lines were signed: its entries are refused at first, kept aside, not lost.
    old = [journal.append(A, [item(f"Prefiere metal {i}")], RULES) for i in range(3)]
    journal.path.write_text("".join(e.to_json() + "\n" for e in old) + "not an entry\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="memory_plugin"):
        assert journal.entries() == []
    assert sum("memory-plugin journal --readmit" in r.getMessage() for r in caplog.records) == 3

    assert [e.write_id for e in journal.readmit([old[1].write_id])] == [old[1].write_id]
    assert [e.write_id for e in journal.readmit()] == [old[0].write_id, old[2].write_id]
    assert [e.write_id for e in WriteJournal(journal.path).entries()] == [
        old[1].write_id,
        old[0].write_id,
        old[2].write_id,
    ]
    assert journal.rejected_path.read_text(encoding="utf-8") == "not an entry\n"
