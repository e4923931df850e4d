"""The LLM extractor against pydantic-ai's FunctionModel: what is sent, what is kept, what fails loudly."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin.errors import ExtractionError
from memory_plugin.extraction import LLMExtractor, default_extractor
from memory_plugin.extraction.llm import DEFAULT_EXTRACTION_INSTRUCTIONS
from memory_plugin.models import MemorizedFact, Message

T0 = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)

CONVERSATION = [
    Message(id="m1", role="user", content="Hola, prefiero aluminio 7075 para prototipos.", timestamp=T0),
    Message(id="m2", role="assistant", content="Entendido. ¿Qué tolerancias necesitáis?", timestamp=T0 + timedelta(1)),
    Message(id="m3", role="user", content="Necesitamos certificación ISO 9001.", timestamp=T0 + timedelta(2)),
]


class ScriptedModel:
    """A FunctionModel body that answers every request with the same facts and records what it was sent."""

    def __init__(
        self, facts: list[dict[str, Any]] | None = None, *, respond: Callable[[AgentInfo], ModelResponse] | None = None
    ) -> None:
        self.facts = facts or []
        self.respond = respond
        self.requests: list[list[ModelMessage]] = []
        self.infos: list[AgentInfo] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(messages)
        self.infos.append(info)
        if self.respond is not None:
            return self.respond(info)
        return ModelResponse(parts=[ToolCallPart(tool_name=info.output_tools[0].name, args={"facts": self.facts})])

    def prompt_text(self, call: int = 0) -> str:
        """Everything the user prompt of request number `call` said."""
        return "\n".join(
            part.content
            for message in self.requests[call]
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart) and isinstance(part.content, str)
        )


def extractor_for(script: ScriptedModel) -> LLMExtractor:
    return LLMExtractor(FunctionModel(script, model_name="scripted"))


async def test_good_output_becomes_validated_facts_with_provenance() -> None:
    script = ScriptedModel(
        [
            {
                "content": "Prefiere aluminio 7075 para prototipos",
                "category": "preference",
                "confidence": 0.9,
                "source": "explicit",
                "importance": 3,
                "message_ids": ["m1"],
            },
            {
                "content": "Requiere certificación ISO 9001",
                "category": "requirement",
                "confidence": 0.95,
                "importance": 5,
                "message_ids": ["m3", "invented-id"],
            },
        ]
    )
    outcome = await extractor_for(script).extract(CONVERSATION)

    assert outcome.model_calls == 1
    assert outcome.rejected == 0
    preference, requirement = outcome.facts
    assert (preference.content, preference.category, preference.confidence, preference.source) == (
        "Prefiere aluminio 7075 para prototipos",
        "preference",
        0.9,
        "explicit",
    )
    assert preference.source_message_ids == ("m1",)
    assert preference.timestamp == T0
    assert (requirement.category, requirement.importance) == ("requirement", 5)
    # The invented id is dropped from provenance; the real one stays.
    assert requirement.source_message_ids == ("m3",)
    assert requirement.timestamp == T0 + timedelta(2)


async def test_request_shows_message_ids_contents_known_facts_and_policy() -> None:
    script = ScriptedModel()
    known = [MemorizedFact(content="Siempre usa acero 316", category="preference", confidence=0.9, source="explicit")]
    await extractor_for(script).extract(CONVERSATION, known_facts=known)

    prompt = script.prompt_text()
    assert f"[m1] user ({T0.isoformat()}): Hola, prefiero aluminio 7075 para prototipos." in prompt
    assert "[m2] assistant (" in prompt
    assert "[m3] user (" in prompt
    assert "Necesitamos certificación ISO 9001." in prompt
    assert "Siempre usa acero 316" in prompt
    assert script.infos[0].instructions is not None
    assert DEFAULT_EXTRACTION_INSTRUCTIONS.strip() in script.infos[0].instructions


async def test_sensitive_data_in_messages_is_not_sent_to_the_model() -> None:
    script = ScriptedModel()
    messages = [Message(id="p1", role="user", content="Cobrad a la 4111 1111 1111 1111\ny prefiero 7075")]
    await extractor_for(script).extract(messages)
    prompt = script.prompt_text()
    assert "4111" not in prompt
    # One message, one line: a newline in the content cannot fake another message.
    assert "[p1] user (" in prompt
    assert "[redacted payment_card] y prefiero 7075" in prompt


async def test_facts_without_valid_ids_are_attributed_to_all_user_messages() -> None:
    script = ScriptedModel(
        [{"content": "Prefiere aluminio 7075", "category": "preference", "confidence": 0.8, "message_ids": ["x"]}]
    )
    outcome = await extractor_for(script).extract(CONVERSATION)
    [fact] = outcome.facts
    assert fact.source_message_ids == ("m1", "m3")


async def test_partial_output_keeps_the_valid_items_and_counts_the_rest() -> None:
    good = {"content": "Prefiere aluminio 7075", "category": "preference", "confidence": 0.9, "message_ids": ["m1"]}
    script = ScriptedModel(
        [
            good,
            {"content": "Le gusta el café", "category": "wish", "confidence": 0.9},
            {"content": "Requiere ISO 9001", "category": "requirement", "confidence": 1.7},
            {**good, "content": "No puede superar 1000 €", "category": "constraint"},
        ]
    )
    outcome = await extractor_for(script).extract(CONVERSATION)
    assert [fact.content for fact in outcome.facts] == ["Prefiere aluminio 7075", "No puede superar 1000 €"]
    assert outcome.rejected == 2
    assert outcome.model_calls == 1


@pytest.mark.parametrize(
    "bad_item",
    [
        {"content": "   ", "category": "preference", "confidence": 0.9},
        {"content": "x" * 501, "category": "preference", "confidence": 0.9},
        {"content": "Prefiere acero", "category": "preference", "confidence": -0.1},
        {"content": "Prefiere acero", "category": "preference", "confidence": 0.9, "source": "rumour"},
        {"content": "Prefiere\x00acero", "category": "preference", "confidence": 0.9},
    ],
)
async def test_each_invalid_item_is_dropped_alone(bad_item: dict[str, Any]) -> None:
    good = {"content": "Requiere ISO 9001", "category": "requirement", "confidence": 0.9, "importance": 9}
    outcome = await extractor_for(ScriptedModel([bad_item, good])).extract(CONVERSATION)
    [fact] = outcome.facts
    assert fact.content == "Requiere ISO 9001"
    assert fact.importance == 5  # out-of-range importance is clamped, not a reason to lose the fact
    assert outcome.rejected == 1


@pytest.mark.parametrize(
    "respond",
    [
        pytest.param(lambda info: ModelResponse(parts=[TextPart("The user likes aluminium.")]), id="plain-text"),
        pytest.param(
            lambda info: ModelResponse(
                parts=[ToolCallPart(tool_name=info.output_tools[0].name, args={"facts": "aluminio 7075"})]
            ),
            id="wrong-shape",
        ),
    ],
)
async def test_unusable_output_on_every_attempt_raises_extraction_error(
    respond: Callable[[AgentInfo], ModelResponse],
) -> None:
    script = ScriptedModel(respond=respond)
    with pytest.raises(ExtractionError, match="UnexpectedModelBehavior"):
        await LLMExtractor(FunctionModel(script), retries=1).extract(CONVERSATION)
    assert len(script.requests) == 2  # the first answer and one retry


async def test_a_retried_answer_counts_every_model_call() -> None:
    answers = iter(["not a tool call", "tool call"])

    def respond(info: AgentInfo) -> ModelResponse:
        if next(answers) == "not a tool call":
            return ModelResponse(parts=[TextPart("Prefiere aluminio 7075.")])
        args = {"facts": [{"content": "Prefiere aluminio 7075", "category": "preference", "confidence": 0.9}]}
        return ModelResponse(parts=[ToolCallPart(tool_name=info.output_tools[0].name, args=args)])

    outcome = await extractor_for(ScriptedModel(respond=respond)).extract(CONVERSATION)
    assert [fact.content for fact in outcome.facts] == ["Prefiere aluminio 7075"]
    assert outcome.model_calls == 2


def _raise(exc: Exception) -> Callable[[AgentInfo], ModelResponse]:
    def respond(info: AgentInfo) -> ModelResponse:
        raise exc

    return respond


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ModelHTTPError(503, "scripted", body="overloaded"), "503"),
        (httpx.ConnectError("connection refused"), "connection refused"),
        # An SDK's own error type (openai 3.x raises httpx2 errors, which are not httpx errors).
        (RuntimeError("httpx2.ReadTimeout: timed out"), "timed out"),
    ],
)
async def test_model_failure_raises_extraction_error(exc: Exception, expected: str) -> None:
    extractor = extractor_for(ScriptedModel(respond=_raise(exc)))
    with pytest.raises(ExtractionError, match=expected) as raised:
        await extractor.extract(CONVERSATION)
    assert raised.value.__cause__ is exc


async def test_empty_messages_do_not_call_the_model() -> None:
    script = ScriptedModel()
    outcome = await extractor_for(script).extract([])
    assert outcome.facts == []
    assert outcome.rejected == 0
    assert outcome.model_calls == 0
    assert script.requests == []


async def test_extractor_is_reusable_across_calls() -> None:
    script = ScriptedModel([{"content": "Prefiere aluminio 7075", "category": "preference", "confidence": 0.9}])
    extractor = extractor_for(script)
    first = await extractor.extract(CONVERSATION[:1])
    second = await extractor.extract(CONVERSATION)
    assert [len(first.facts), len(second.facts)] == [1, 1]
    assert len(script.requests) == 2
    assert "[m3]" not in script.prompt_text(0)
    assert "[m3]" in script.prompt_text(1)


def test_name_identifies_the_model() -> None:
    assert extractor_for(ScriptedModel()).name == "llm:function:scripted"
    assert LLMExtractor("openai:gpt-4o-mini").name == "llm:openai:gpt-4o-mini"


async def test_unusable_model_name_fails_at_extraction_not_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    extractor = default_extractor("openai:gpt-4o-mini")  # no API key: building it must still work
    assert isinstance(extractor, LLMExtractor)
    with pytest.raises(ExtractionError, match="openai:gpt-4o-mini"):
        await extractor.extract(CONVERSATION)
    with pytest.raises(ExtractionError, match="Unknown model"):
        await LLMExtractor("no-such-provider:model").extract(CONVERSATION)
