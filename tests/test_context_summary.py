"""The rolling summary: written only when due, versioned with rollback, a failed update keeps the old one."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest
from psycopg_pool import AsyncConnectionPool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin.context.store import InMemoryContextStore, PostgresContextStore, session_scope
from memory_plugin.context.summarizer import RollingSummarizer
from memory_plugin.context.summary import (
    EXTRACTIVE_HEADER,
    SummaryPolicy,
    detect_language,
    summary_due,
)
from memory_plugin.context.tokens import token_counter
from memory_plugin.errors import InvalidMemoryInputError
from memory_plugin.models import MemorizedFact, Message

COUNTER = token_counter("openai:gpt-4o")
SCOPE = session_scope("s1")


def user(text: str) -> Message:
    return Message(role="user", content=text)


def bot(text: str) -> Message:
    return Message(role="assistant", content=text)


def test_triggers_each_fire_alone_and_small_talk_does_not() -> None:
    policy = SummaryPolicy(min_new_chars=600, every_n_messages=8)
    assert summary_due([user("hola"), bot("¡Hola! ¿En qué te ayudo?")], policy) is None
    assert summary_due([user("Vamos con el aluminio 7075 para las bridas")], policy) == "decision"
    assert summary_due([user("No me sugieras acero inoxidable")], policy) == "decision"
    assert summary_due([user("Cambiando de tema, ¿hacéis anodizado?")], policy) == "topic_change"
    assert summary_due([user("x " * 400)], policy) == "new_text"
    eight = [user(f"pregunta corta {i}") if i % 2 == 0 else bot("respuesta") for i in range(8)]
    assert summary_due(eight, policy) == "cadence"
    assert summary_due(eight[:7], policy) is None
    assert summary_due([user("Cambiando de tema")], SummaryPolicy(on_topic_change=False)) is None


def test_language_of_the_conversation() -> None:
    assert detect_language(["¿Qué plazo tendríais para 10 piezas de aluminio?"]) == "es"
    assert detect_language(["What lead time can you do for ten parts in aluminium?"]) == "en"


def summarizer_model(answers: list[str], seen: list[str]) -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(str(messages[-1].parts[-1].content))  # type: ignore[union-attr]
        text = answers.pop(0)
        if text == "boom":
            raise ValueError("model failed")
        return ModelResponse(parts=[TextPart(text)])

    return FunctionModel(answer)


async def test_model_summary_versions_rollback_and_failures_keep_the_previous() -> None:
    store = InMemoryContextStore()
    seen: list[str] = []
    answers = ["v1: aluminio 7075", "  \n ", "boom", "v2", "v3", "v4: outdated: aluminio → titanio"]
    summarizer = RollingSummarizer(store, COUNTER, summarizer_model(answers, seen))
    uid = uuid4()
    msgs = [user("Recuerda que prefiero aluminio 7075")]
    first = await summarizer.update(uid, SCOPE, msgs)
    assert first.written
    assert first.current is not None
    assert first.current.content == "v1: aluminio 7075"
    assert first.current.kind == "model"
    # Nothing new: not due, no call.
    assert (await summarizer.update(uid, SCOPE, msgs)).model_calls == 0
    msgs.append(user("Vamos con 50 piezas"))
    empty = await summarizer.update(uid, SCOPE, msgs)
    failed = await summarizer.update(uid, SCOPE, msgs)
    assert (empty.written, empty.error) == (False, "empty summary")
    assert not failed.written
    assert failed.error is not None
    assert (await summarizer.current(uid, SCOPE)).content == "v1: aluminio 7075"  # type: ignore[union-attr]
    for text in ("Vamos con anodizado", "Confirmo la entrega el lunes", "Ya no quiero aluminio, mejor titanio"):
        msgs.append(user(text))
        assert (await summarizer.update(uid, SCOPE, msgs, outdated=[("aluminio 7075", "titanio")])).written
    versions = await store.summary_versions(uid, SCOPE)
    assert [v.content for v in versions] == ["v4: outdated: aluminio → titanio", "v3", "v2"]  # three kept
    # The model saw the old summary, only the new message, and the replaced fact.
    assert "v3" in seen[-1]
    assert "titanio" in seen[-1]
    assert "Vamos con 50" not in seen[-1]
    back = await summarizer.rollback(uid, SCOPE)
    assert back is not None
    assert back.content == "v3"


async def test_summary_is_clipped_to_its_token_limit() -> None:
    long = "\n".join(f"línea {i} con bastantes palabras sobre piezas y plazos" for i in range(200))
    summarizer = RollingSummarizer(
        InMemoryContextStore(), COUNTER, summarizer_model([long], []), SummaryPolicy(max_tokens=100)
    )
    done = await summarizer.update(uuid4(), SCOPE, [user("Decidido: 200 piezas")])
    assert done.current is not None
    assert 0 < COUNTER.count(done.current.content) <= 100


async def test_offline_summary_is_extractive_says_so_and_keeps_decisions() -> None:
    summarizer = RollingSummarizer(InMemoryContextStore(), COUNTER)
    uid = uuid4()
    msgs = [user("Hola"), user("Recuerda que prefiero aluminio 7075"), bot("Anotado."), user("No me sugieras acero")]
    done = await summarizer.update(uid, "user", msgs, outdated=[("Prefiere latón", "Prefiere aluminio 7075")])
    assert done.current is not None
    text = done.current.content
    assert text.startswith(EXTRACTIVE_HEADER["es"])
    assert "outdated: Prefiere latón → Prefiere aluminio 7075" in text
    assert "aluminio 7075" in text
    assert "acero" in text
    assert "Hola" not in text
    assert done.model_calls == 0
    english = await summarizer.update(uuid4(), "user", [user("Let's go with brass for the fittings")])
    assert english.current is not None
    assert english.current.content.startswith(EXTRACTIVE_HEADER["en"])


async def test_resync_rebuilds_from_valid_facts_only() -> None:
    summarizer = RollingSummarizer(
        InMemoryContextStore(), COUNTER, policy=SummaryPolicy(resync_after=timedelta(days=7))
    )
    uid = uuid4()
    await summarizer.update(uid, "user", [user("Recuerda que prefiero latón")])
    current = await summarizer.current(uid, "user")
    assert not summarizer.resync_due(current)
    assert summarizer.resync_due(current, current.created_at + timedelta(days=8))  # type: ignore[union-attr]
    old = MemorizedFact(content="Prefiere latón", category="preference", confidence=0.9, source="explicit")
    new = MemorizedFact(content="Prefiere aluminio 7075", category="preference", confidence=0.9, source="explicit")
    gone = old.model_copy(update={"invalid_at": new.timestamp})
    rebuilt = await summarizer.resync(uid, "user", [gone, new])
    assert rebuilt is not None
    assert rebuilt.kind == "resync"
    assert "aluminio 7075" in rebuilt.content
    assert "latón" not in rebuilt.content
    assert await summarizer.resync(uid, "user", [gone]) is None


async def test_postgres_keeps_three_versions_per_scope_and_rolls_back(database_url: str) -> None:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False)
    await pool.open(wait=True)
    try:
        store = PostgresContextStore(pool)
        uid, other = uuid4(), uuid4()
        for i in range(1, 6):
            await store.add_summary(uid, SCOPE, f"v{i}", kind="model", language="es", message_count=i)
        await store.add_summary(uid, "user", "del usuario", kind="extractive", language="es", message_count=1)
        versions = await store.summary_versions(uid, SCOPE)
        assert [(v.version, v.content, v.message_count) for v in versions] == [(5, "v5", 5), (4, "v4", 4), (3, "v3", 3)]
        assert [v.content for v in await store.summary_versions(uid, "user")] == ["del usuario"]
        assert await store.summary_versions(other, SCOPE) == []  # RLS: another user sees nothing
        back = await store.drop_latest_summary(uid, SCOPE)
        assert back is not None
        assert back.content == "v4"
        with pytest.raises(InvalidMemoryInputError):
            await store.summary_versions(uid, "everyone")
    finally:
        await pool.close()


async def test_offline_summary_stops_quoting_a_replaced_preference() -> None:
    summarizer = RollingSummarizer(InMemoryContextStore(), COUNTER)
    uid = uuid4()
    msgs = [user("Recuerda que prefiero aluminio 7075")]
    await summarizer.update(uid, "user", msgs)
    msgs.append(user("Ya no quiero aluminio 7075, mejor titanio grado 5"))
    done = await summarizer.update(uid, "user", msgs, outdated=[("Prefiere aluminio 7075", "Prefiere titanio grado 5")])
    assert done.current is not None
    lines = done.current.content.splitlines()
    assert "outdated: Prefiere aluminio 7075 → Prefiere titanio grado 5" in lines
    assert [ln for ln in lines if "7075" in ln and not ln.startswith("outdated:")] == []


def test_a_long_exchange_triggers_but_many_short_ones_only_by_count() -> None:
    policy = SummaryPolicy(min_new_chars=600, every_n_messages=8)
    short = [user("¿Plazo para 10 piezas?"), bot("Dos semanas " * 20)]  # ~260 characters
    assert summary_due(short * 3, policy) is None  # 780 characters over three exchanges: not one long one
    assert summary_due([user("¿Plazo?"), bot("Dos semanas " * 60)], policy) == "new_text"


async def test_a_sliding_window_of_messages_keeps_feeding_the_summary() -> None:
    seen: list[str] = []
    summarizer = RollingSummarizer(InMemoryContextStore(), COUNTER, summarizer_model([f"v{i}" for i in range(9)], seen))
    uid = uuid4()
    said: list[Message] = []
    for i in range(3):
        said.append(user(f"Vamos con el pedido número {i}"))
        window = said[-2:]  # a session keeps only its last messages
        done = await summarizer.update(uid, SCOPE, window)
        assert done.written
        assert f"pedido número {i}" in seen[-1]
        assert f"pedido número {i - 1}" not in seen[-1]  # covered by the previous version
    current = await summarizer.current(uid, SCOPE)
    assert current is not None
    assert current.message_count == 3


async def test_a_first_session_summary_builds_on_the_users() -> None:
    seen: list[str] = []
    summarizer = RollingSummarizer(InMemoryContextStore(), COUNTER, summarizer_model(["nuevo"], seen))
    await summarizer.update(uuid4(), SCOPE, [user("Vamos con titanio")], start_from="Pidió 50 bridas en 2025")
    assert "Pidió 50 bridas en 2025" in seen[0]


async def test_the_summarizer_is_told_the_conversations_language() -> None:
    told: list[str | None] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        told.append(info.instructions)
        return ModelResponse(parts=[TextPart("resumen")])

    summarizer = RollingSummarizer(InMemoryContextStore(), COUNTER, FunctionModel(answer))
    await summarizer.update(uuid4(), SCOPE, [user("Vamos con el aluminio, ¿qué plazo tendríais?")])
    await summarizer.update(uuid4(), SCOPE, [user("Let's go with brass, what lead time can you do?")])
    assert "Spanish" in (told[0] or "")
    assert "English" in (told[1] or "")
    assert "outdated:" in (told[0] or "")


async def test_resync_is_due_a_week_after_the_last_one_however_often_the_summary_changes() -> None:
    summarizer = RollingSummarizer(InMemoryContextStore(), COUNTER)
    uid = uuid4()
    msgs = [user("Vamos con bridas")]
    first = (await summarizer.update(uid, "user", msgs)).current
    assert first is not None
    msgs.append(user("Vamos con titanio"))
    second = (await summarizer.update(uid, "user", msgs)).current
    assert second is not None
    assert second.resynced_at == first.resynced_at  # carried, not restarted by each rewrite
    assert summarizer.resync_due(second, first.created_at + timedelta(days=8))
    fact = MemorizedFact(content="Prefiere titanio", category="preference", confidence=0.9, source="explicit")
    rebuilt = await summarizer.resync(uid, "user", [fact])
    assert rebuilt is not None
    assert not summarizer.resync_due(rebuilt, rebuilt.created_at + timedelta(days=6))


async def test_offline_summary_drops_a_replaced_statement_said_in_another_language() -> None:
    summarizer = RollingSummarizer(InMemoryContextStore(), COUNTER)
    uid = uuid4()
    msgs = [user("Remember we need deliveries on Mondays"), user("Please remember our budget cap is 5000 € per order")]
    await summarizer.update(uid, "user", msgs)
    msgs.append(user("A partir de ahora entregamos los miércoles"))
    await summarizer.update(uid, "user", msgs, outdated=[("Entregas los lunes", "Entregas los miércoles")])
    msgs.append(user("From now on the budget cap is 8000 € per order"))
    done = await summarizer.update(
        uid, "user", msgs, outdated=[("Presupuesto máximo 5000 € por pedido", "Presupuesto máximo 8000 € por pedido")]
    )
    assert done.current is not None
    quoted = [ln for ln in done.current.content.splitlines() if ln.startswith("- ")]
    assert quoted == [
        "- From now on the budget cap is 8000 € per order",
        "- A partir de ahora entregamos los miércoles",
    ]


async def test_a_summary_is_stored_through_the_privacy_filter_for_notes() -> None:
    """The summary quotes the user and is kept for weeks: secrets and the user's own clinical detail never
    reach it, offline or from a model, and the model never sees a card number."""
    card = "4111 1111 1111 1111"
    said = [user(f"Recuerda que pago con la tarjeta {card}"), user("Vamos con aluminio, tengo diabetes tipo 2")]
    offline = await RollingSummarizer(InMemoryContextStore(), COUNTER).update(uuid4(), SCOPE, said)
    assert offline.current is not None
    assert card not in offline.current.content
    assert "[redacted payment_card]" in offline.current.content
    assert "diabetes" not in offline.current.content
    assert "aluminio" in offline.current.content

    seen: list[str] = []
    answer = f"Paga con la tarjeta {card}\nTiene diabetes tipo 2 y no puede hacer turnos de noche\nVa con aluminio"
    echo = RollingSummarizer(InMemoryContextStore(), COUNTER, summarizer_model([answer], seen))
    written = await echo.update(uuid4(), SCOPE, said)
    assert card not in seen[-1]
    assert written.current is not None
    # Said about the user (third person): the line becomes the fact rule's non-clinical health note.
    assert written.current.content.splitlines() == [
        "Paga con la tarjeta [redacted payment_card]",
        "Tiene una condición médica que afecta a los turnos",
        "Va con aluminio",
    ]


async def test_a_summary_with_nothing_left_after_the_filter_keeps_the_previous_version() -> None:
    answers = ["Prefiere aluminio 7075", "4111 1111 1111 1111"]
    summarizer = RollingSummarizer(InMemoryContextStore(), COUNTER, summarizer_model(answers, []))
    uid, msgs = uuid4(), [user("Recuerda que prefiero aluminio 7075")]
    assert (await summarizer.update(uid, SCOPE, msgs)).written
    msgs.append(user("Vamos con 50 piezas"))
    refused = await summarizer.update(uid, SCOPE, msgs)
    assert not refused.written
    assert refused.error == "nothing left after the filter"
    assert (await summarizer.current(uid, SCOPE)).content == "Prefiere aluminio 7075"  # type: ignore[union-attr]
