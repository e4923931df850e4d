"""A user holding a row in every table the export covers, written through the public API where there is one
and by SQL where the row's owner is another component (chats, conversations, checkpoints, jobs)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import psycopg

from memory_plugin import MemorizedFact, MemoryManager, MemoryUpdate
from memory_plugin.models import ProjectRecord, UserPreferences

VECTOR = "[" + ",".join(str(round(0.01 * (i % 17) + 0.001, 3)) for i in range(384)) + "]"


async def fill_user(memory: MemoryManager, admin_conn: psycopg.Connection[Any], user: UUID) -> None:
    """Facts (one superseded), a preference, a project, a pattern, a note, and a row in every other section."""
    budget = MemorizedFact(
        content="Su presupuesto máximo es 1500€", category="constraint", confidence=0.9, source="explicit"
    )
    stored = await memory.update_memory(
        MemoryUpdate(
            user_id=user,
            session_id="s-1",
            new_facts=[
                budget,
                MemorizedFact(
                    content="Prefiere aluminio 7075", category="preference", confidence=0.8, source="explicit"
                ),
            ],
            preferences=UserPreferences(preferred_materials=["aluminio 7075"], communication_style="technical"),
            project=ProjectRecord(description="50 piezas de fresado CNC"),
            patterns=["pide presupuesto los lunes"],
        )
    )
    old = next(f for f in stored if "1500" in f.content)
    newer = MemorizedFact(
        content="Su presupuesto máximo es 2000€",
        category="constraint",
        confidence=0.9,
        source="explicit",
        replaces=old.id,
    )
    await memory.update_memory(MemoryUpdate(user_id=user, session_id="s-2", new_facts=[newer]))
    await memory.remember(
        user, "Dijo: «el viernes cerramos», con comillas y ünicode ✓", metadata={"speaker": "Ana"}, session_id="s-2"
    )
    now = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    admin_conn.execute(
        "insert into public.memory_slots (user_id, slots, updated_at) values (%s, %s, %s)",
        (user, json.dumps({"budget": [{"text": "2000€", "source": "fact"}]}), now),
    )
    for version in (1, 2):
        admin_conn.execute(
            "insert into public.memory_summaries (user_id, scope, version, content, kind, message_count, covered_until,"
            " created_at) values (%s, 'user', %s, %s, 'model', 4, %s, %s)",
            (user, version, f"Resumen v{version}: fresado CNC", now, now),
        )
    chat = uuid4()
    history = [{"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "hola"}]}]
    admin_conn.execute(
        "insert into public.chats (id, user_id, title, full_history, assistant_history, summary_text,"
        " summary_embedding, summary_model, turn_count, created_at, last_activity_at)"
        " values (%s, %s, 'Pedido', %s, %s, 'pedido de bridas', %s, 'test', 1, %s, %s)",
        (chat, user, json.dumps(history), json.dumps(history), VECTOR, now, now),
    )
    admin_conn.execute(
        "insert into memory_private.chat_append_keys (user_id, chat_id, idempotency_key, request_hash, turns,"
        " created_at) values (%s, %s, 'retry-1', 'abc', 1, %s)",
        (user, chat, now),
    )
    admin_conn.execute(
        "insert into public.conversation_entries (user_id, id, parent_id, message, created_at) values"
        " (%s, 'e1', null, %s, %s), (%s, 'e2', 'e1', %s, %s)",
        (user, json.dumps(history[0]), now, user, json.dumps({"kind": "response", "parts": []}), now),
    )
    admin_conn.execute(
        "insert into public.conversations (user_id, conversation_id, head_id, revision, updated_at)"
        " values (%s, 'c1', 'e2', 'r1', %s)",
        (user, now),
    )
    admin_conn.execute(
        "insert into memory_private.workflow_checkpoints (user_id, session_id, step, state, created_at)"
        " values (%s, 's-1', 'quote', %s, %s)",
        (user, json.dumps({"qty": 50}), now),
    )
    admin_conn.execute(
        "insert into memory_private.memory_sessions (session_id, user_id, messages, last_active)"
        " values (%s, %s, %s, 1700000000.5)",
        (f"sess-{user}", user, json.dumps([{"role": "user", "content": "hola"}])),
    )
    admin_conn.execute(
        # Dead today: workers delete dead jobs a week old.
        "insert into public.memory_jobs (user_id, session_id, payload, state) values (%s, 's-1', %s, 'dead')",
        (user, json.dumps({"messages": []})),
    )
    admin_conn.execute(
        "insert into memory_private.memory_applied_writes (user_id, write_id, item_count, applied_at)"
        " values (%s, %s, 1, %s) on conflict do nothing",
        (user, uuid4(), now),
    )
    admin_conn.execute(
        "insert into memory_private.memory_limits (name, user_id, value, description)"
        " values ('chats_per_user', %s, 500, 'a customer with more chats')",
        (user,),
    )
    admin_conn.execute("insert into memory_private.memory_consent (user_id, paused) values (%s, false)", (user,))
    admin_conn.execute(
        "insert into memory_private.memory_receipts (user_id, session_id, created_at, receipt)"
        " values (%s, 's-2', %s, %s)",
        (user, now, json.dumps({"injected": [{"id": str(old.id), "reason": "search", "score": 0.8, "tokens": 9}]})),
    )
