"""The budget-request workflow: seven steps, with memory, for one user message.

    async with MemoryManager.open(MemorySettings(vocabulary=SHOP_VOCABULARY)) as memory:
        workflow = BudgetRequestWorkflow.build(memory)
        turn = await workflow.handle(session_id="s-1", user_id=user_id, message="Necesito 50 piezas en 7075")
        turn.reply, turn.facts_stored, turn.warnings

The manager should use the shop's vocabulary (`agents/vocabulary.py`), so that a new stance on a material
supersedes the old one; `build` logs a warning otherwise.

1. `memory.turn(...).start` (`get_memory_context`): the turn checked, the session's state and the user's
   long-term memory;
2. `add_message`: record the user message;
3. classify intent and entities (a pydantic-ai agent) → `update_session_intents`/`update_session_entities`;
4. `format_memory_for_agent`: the block the budget agent will see (returned for display);
5. run the budget agent; `MemoryCapability` puts the memory block in its instructions;
6. `add_message`: record the answer;
7. extract and persist facts when the manager's extraction policy says so (a memory instruction such as
   "recuerda…", the end of the request, or every N user messages: one batched call), and store the stated
   materials, and the project and pattern of a completed request, which need no model.

Who records messages: the workflow does (steps 2 and 6), because it needs the user message in the session
before classifying, and the budget agent's capability is built with `record_messages=False` so nothing is
recorded twice. Extraction and storage failures never lose the reply: they are logged and returned in
`BudgetTurn.warnings`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from uuid import UUID

from pydantic_ai import Agent
from pydantic_ai.exceptions import AgentRunError

from agents.budget_agent import build_budget_agent, offline_budget_model
from agents.intent import (
    Classification,
    build_intent_classifier,
    classify_offline,
    is_rejection,
    offline_classifier_model,
)
from agents.models import resolve_agent_model
from agents.vocabulary import MATERIAL_SLOT
from memory_plugin.capability import MemoryDeps
from memory_plugin.chats.checkpoints import CheckpointStore
from memory_plugin.errors import InvalidMemoryInputError, MemoryPluginError
from memory_plugin.logs import LOG_PREFIX
from memory_plugin.manager import MemoryManager
from memory_plugin.models import (
    MemorizedFact,
    MemoryUpdate,
    Message,
    ProjectRecord,
    ShortTermMemory,
    UserPreferences,
)
from memory_plugin.settings import MemorySettings

__all__ = ["BudgetRequestWorkflow", "BudgetTurn"]

logger = logging.getLogger("memory_plugin")


@dataclass
class BudgetTurn:
    """The outcome of one user message."""

    reply: str
    """The budget agent's answer."""
    classification: Classification
    """Intent and entities of the user message (step 3)."""
    memory_block: str
    """The memory block the budget agent received in its instructions ("" when nothing is known yet)."""
    facts_stored: list[MemorizedFact] = field(default_factory=list)
    """Facts written (or reinforced) in long-term memory by this turn's inline extraction (with background
    extraction they are written later: `memory.flush()` waits for them)."""
    warnings: list[str] = field(default_factory=list)
    """Problems that did not stop the turn (classifier fallback, extraction or store failures)."""
    extracted: bool = False
    """Whether step 7's policy fired: a fact extraction ran (inline) or was queued (background)."""
    messages_seen: int = 0
    """Messages the session has seen after this turn (drives the extraction cadence)."""


@dataclass
class BudgetRequestWorkflow:
    """Budget requests for a CNC machining shop, with conversational memory."""

    memory: MemoryManager
    """Short- and long-term memory."""
    classifier: Agent[None, Classification]
    """Step 3's intent and entity classifier."""
    budget_agent: Agent[MemoryDeps, str]
    """Step 5's agent; its `MemoryCapability` must not record messages (the workflow does)."""
    extract_inline: bool | None = None
    """Step 7 extracts before the turn returns (True) or queues it for the background worker (False); None:
    `not settings.background_extraction` (queued by default)."""
    checkpoints: CheckpointStore | None = None
    """Where each turn's snapshot goes (question, answer, route, entities), so another worker or a restarted
    one resumes the request (`checkpoints.latest(user, session)`); at most `MEMORY_MAX_CHECKPOINTS` per
    session. None: no snapshots."""

    @classmethod
    def build(
        cls,
        memory: MemoryManager,
        settings: MemorySettings | None = None,
        *,
        offline: bool = False,
        extract_inline: bool | None = None,
    ) -> BudgetRequestWorkflow:
        """A workflow with the configured model (`resolve_agent_model`), or the offline models when none is
        configured or `offline` is True."""
        model_name = None if offline else resolve_agent_model(settings or memory.settings)
        if MATERIAL_SLOT not in memory.settings.vocabulary.slots:
            logger.warning(
                "%s the memory manager does not use the shop's vocabulary: a new stance on a material will not "
                "supersede the old one; open it with MemorySettings(vocabulary=SHOP_VOCABULARY)",
                LOG_PREFIX,
            )
        return cls(
            memory=memory,
            classifier=build_intent_classifier(model_name or offline_classifier_model()),
            budget_agent=build_budget_agent(memory, model_name or offline_budget_model()),
            extract_inline=extract_inline,
        )

    async def handle(self, *, session_id: str, user_id: str | UUID, message: str) -> BudgetTurn:
        """Answer one user message, running the seven steps in order.

        Raises `InvalidMemoryInputError` for bad input (a user id that is not a UUID, an empty or oversized
        message) before anything is recorded, and the budget agent's own errors (no reply to keep then).
        """
        if not isinstance(message, str) or not message.strip():
            raise InvalidMemoryInputError("message must be a non-empty string")
        warnings: list[str] = []
        # 1. The turn starts as every face's does: checked, then the session so far and what we know about the
        #    user (the budget agent's capability reads its own budgeted context in step 5).
        context = (await self.memory.turn(session_id, user_id).start(message)).context
        assert context is not None  # a turn started without a context builder reads `get_memory_context`
        if not context.long_term_available:
            warnings.append("long-term memory is unavailable: answering with this session's memory only")
        # 2. The user message joins short-term memory.
        seen = await self.memory.add_message(session_id, Message(role="user", content=message), user_id=user_id)
        # 3. Intent and entities, recorded in the session.
        classification = await self._classify(message, warnings)
        await self.memory.update_session_intents(session_id, classification.intent, user_id=user_id)
        # The materials a rejection names ("nunca me sugieras titanio") are not this request's: the session (and
        # the project made of it) never lists them; the extraction stores the rejection.
        entities = {
            kind: values
            for kind, values in classification.entities.items()
            if not (kind == "materials" and is_rejection(message))
        }
        if entities:
            await self.memory.update_session_entities(session_id, entities, user_id=user_id)
        # 4. The block the agent will see. The long-term part comes from step 1; the short-term part is
        #    re-read so that it includes this message and its entities, exactly as the capability renders it.
        short = await self.memory.get_short_term(session_id, user_id=user_id)
        memory_block = self.memory.format_memory_for_agent(context.model_copy(update={"short_term": short}))
        # 5. The budget agent; its MemoryCapability injects the memory into the instructions.
        result = await self.budget_agent.run(message, deps=MemoryDeps(session_id=session_id, user_id=user_id))
        reply = result.output
        # 6. The answer joins short-term memory.
        if reply.strip():
            seen = await self.memory.add_message(session_id, Message(role="assistant", content=reply), user_id=user_id)
        else:
            warnings.append("the budget agent returned an empty answer; it was not recorded")
        # 7. Extract and persist on the extraction policy's triggers.
        turn = BudgetTurn(
            reply=reply,
            classification=classification,
            memory_block=memory_block,
            warnings=warnings,
            messages_seen=seen,
        )
        turn.facts_stored, turn.extracted = await self._persist(session_id, user_id, message, classification, warnings)
        await self._checkpoint(session_id, user_id, message, turn)
        return turn

    async def _checkpoint(self, session_id: str, user_id: str | UUID, message: str, turn: BudgetTurn) -> None:
        """The turn's snapshot, if a checkpoint store is set; a failure is a warning (the answer exists)."""
        if self.checkpoints is None:
            return
        state = {
            "question": message,
            "output": turn.reply,
            "route": turn.classification.intent,
            "entities": turn.classification.entities,
            "request_complete": turn.classification.request_complete,
        }
        try:
            await self.checkpoints.save(
                UUID(str(user_id)),
                session_id,
                "budget_turn",
                state,
                max_checkpoints=self.memory.settings.max_checkpoints,
            )
        except MemoryPluginError as exc:
            logger.warning("%s checkpoint of session %s not saved: %s", LOG_PREFIX, session_id, exc)
            turn.warnings.append(f"checkpoint not saved ({exc})")

    async def _classify(self, message: str, warnings: list[str]) -> Classification:
        try:
            result = await self.classifier.run(message)
        except AgentRunError as exc:
            # A classifier outage must not block the answer: the offline rules are a sound fallback.
            logger.warning("%s intent classifier failed, using the offline rules: %s", LOG_PREFIX, exc)
            warnings.append(f"intent classifier failed ({exc}); used the offline rules")
            return classify_offline(message)
        return result.output

    async def _persist(
        self, session_id: str, user_id: str | UUID, message: str, classification: Classification, warnings: list[str]
    ) -> tuple[list[MemorizedFact], bool]:
        """Step 7: facts through the manager's extraction policy (explicit instruction, end of request, every
        N user messages; batched, never the same message twice), then what needs no model: the stated
        materials, and the project and pattern of a completed request. Returns (facts stored, whether an
        extraction ran)."""
        facts, extracted = await self._extract(session_id, user_id, classification.request_complete, warnings)
        # A rejection names materials too ("nunca me sugieras titanio"): they are never stored as preferred (the
        # extraction stores the rejection), whatever the classifier said.
        stated = classification.explicit_preference and not is_rejection(message)
        short = await self.memory.get_short_term(session_id, user_id=user_id)
        materials = classification.entities.get("materials", [])
        preferences = UserPreferences(preferred_materials=materials) if stated and materials else None
        project = _project(session_id, short) if classification.request_complete else None
        patterns = (
            [f"budget_request: {service}" for service in short.entities.get("services", [])]
            if classification.request_complete
            else []
        )
        if preferences or project or patterns:
            update = MemoryUpdate(
                user_id=UUID(str(user_id)),
                session_id=session_id,
                preferences=preferences,
                project=project,
                patterns=patterns,
            )
            try:
                await self.memory.update_memory(update)
            except MemoryPluginError as exc:
                logger.warning("%s could not store memory for session %s: %s", LOG_PREFIX, session_id, exc)
                warnings.append(f"could not store memory: {exc}")
        return facts, extracted

    async def _extract(
        self, session_id: str, user_id: str | UUID, end_of_request: bool, warnings: list[str]
    ) -> tuple[list[MemorizedFact], bool]:
        """Step 7's facts: extracted now (inline), or queued for the background worker (no facts yet); the
        turn's end is the library's (`MemoryManager.turn(...).finish`), the messages recorded already."""
        inline = self.memory.extracts_inline(self.extract_inline)
        turn = await self.memory.turn(session_id, user_id).finish(inline=inline, end_of_request=end_of_request)
        if turn.error is not None:
            what = "fact extraction failed" if inline else "fact extraction could not be queued"
            warnings.append(f"{what}: {turn.error}")
        elif turn.scheduled is not None and turn.scheduled.outcome == "full":
            warnings.append("the memory queue is full: this turn's facts wait for the session's next trigger")
        return (list(turn.extraction.stored) if turn.extraction else []), turn.extraction_ran


def _project(session_id: str, short: ShortTermMemory) -> ProjectRecord | None:
    """The session's budget request as a project record (None when the session named nothing)."""
    entities = short.entities
    materials = entities.get("materials", [])
    services = entities.get("services", [])
    quantity = entities.get("quantity", [])[-1:]  # the latest quantity stated wins
    details = entities.get("tolerances", []) + entities.get("certifications", [])
    if not (materials or services or quantity):
        return None
    words: list[str] = []
    if quantity:
        words.append(quantity[0])
    words.append(f"de {', '.join(services)}" if services else "mecanizadas")
    if materials:
        words.append(f"en {', '.join(materials)}")
    description = " ".join(words)
    if details:
        description += f" ({', '.join(details)})"
    return ProjectRecord(
        description=description,
        materials=tuple(materials),
        quantity=quantity[0] if quantity else None,
        status="requested",
        session_id=session_id,
    )
