"""What lasts and what this message chose travel apart, and the history grows append-only between turns."""

from __future__ import annotations

import dataclasses

from memory_plugin.context.budget import BudgetSettings, ContextInputs, assemble_context
from memory_plugin.context.history import history_tokens, messages_from_session
from memory_plugin.context.slots import slots_from_facts
from memory_plugin.context.tokens import token_counter
from memory_plugin.models import MemorizedFact, Message, UserPreferences

COUNTER = token_counter("openai:gpt-4o")


def fact(content: str, category: str = "feedback") -> MemorizedFact:
    return MemorizedFact(content=content, category=category, confidence=0.9, source="explicit")  # type: ignore[arg-type]


def session(n: int) -> list[Message]:
    said: list[Message] = []
    for i in range(n):
        said.append(Message(role="user", content=f"pregunta {i}: " + "piezas de aluminio " * 10))
        said.append(Message(role="assistant", content=f"respuesta {i}: " + "plazo de entrega " * 10))
    return said


STANDING = slots_from_facts(
    [fact("No sugerir fibra de vidrio", "rejection"), fact("Es un taller de drones en Zaragoza", "fact")]
)


def test_standing_knowledge_in_the_instructions_per_message_facts_apart() -> None:
    inputs = ContextInputs(
        UserPreferences(preferred_materials=["aluminio 7075"]), STANDING, facts=[fact("Las hélices llegaron tarde")]
    )
    out = assemble_context(inputs, COUNTER)
    for kept in ("aluminio 7075", "fibra de vidrio", "Zaragoza"):
        assert kept in out.standing
    assert "hélices" not in out.standing
    assert "hélices" in out.turn
    assert out.turn.count("</memory") == 1
    # Another message, other facts: the instructions are byte-identical.
    other = assemble_context(dataclasses.replace(inputs, facts=[fact("Pidió 40 soportes")]), COUNTER)
    assert other.standing == out.standing
    assert other.turn != out.turn
    r = out.report
    assert r.total == COUNTER.count(out.standing) + COUNTER.count(out.turn) + r.messages + r.prompt


def test_the_prompt_is_paid_from_the_budget() -> None:
    history = messages_from_session(session(30))
    free = assemble_context(ContextInputs(history=history), COUNTER)
    paid = assemble_context(ContextInputs(history=history, prompt_tokens=300), COUNTER)
    assert paid.report.messages + 300 <= 1000 < free.report.messages + 300
    assert paid.report.total <= 1000


def test_the_history_keeps_its_start_while_it_fits_then_restarts_with_room() -> None:
    settings = BudgetSettings(total_tokens=600)
    said = session(30)
    first = assemble_context(ContextInputs(history=messages_from_session(said[:20])), COUNTER, settings)
    start = len(said[:20]) - len(first.history)
    # One more exchange: from the same start it no longer fits, so it restarts at `refill_ratio` of the room.
    grown = messages_from_session(said[:22])
    restarted = assemble_context(ContextInputs(history=grown, anchor=start), COUNTER, settings)
    assert history_tokens(restarted.history, COUNTER) <= settings.refill_ratio * (600 - restarted.report.memory)
    # The next exchange fits from the restarted start: the request only grows at its end.
    anchor = len(grown) - len(restarted.history)
    kept = assemble_context(ContextInputs(history=messages_from_session(said[:24]), anchor=anchor), COUNTER, settings)
    assert kept.history[: len(restarted.history)] == restarted.history
    assert len(kept.history) == len(restarted.history) + 2
