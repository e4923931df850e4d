"""A second OS process for the background tests (not a test module): `python tests/background_child.py MODE ...`.

- `hang URL DATA_DIR USER SESSION`: queue one extraction whose model never answers, print the job id, wait to be
  killed (the job is left running, leased);
- `work URL DATA_DIR LOG`: a worker whose extraction model appends the session marker it sees to LOG, then
  stores a fact naming it; runs until terminated.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin.extraction import LLMExtractor
from memory_plugin.manager import MemoryManager
from memory_plugin.models import Message
from memory_plugin.settings import MemorySettings

MARKER = re.compile(r"pieza-\d+")


def prompt_of(messages: list[ModelMessage]) -> str:
    """The text of the extraction request."""
    return "\n".join(
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    )


def fact_response(info: AgentInfo, contents: list[str], category: str = "preference") -> ModelResponse:
    """The extractor's answer: these contents as facts of `category`."""
    facts: list[dict[str, Any]] = [{"content": c, "category": category, "confidence": 0.9} for c in contents]
    return ModelResponse(parts=[ToolCallPart(tool_name=info.output_tools[0].name, args={"facts": facts})])


def settings_for(url: str, data_dir: str, **overrides: Any) -> MemorySettings:
    """Test settings: the given database, no embeddings (fast start), short leases and polls."""
    return MemorySettings(
        database_url=url,
        data_dir=Path(data_dir),
        embedding_model="none",
        background_lease_seconds=1.0,
        background_poll_seconds=0.1,
        background_retry_base_seconds=0.1,
        **overrides,
    )


async def hang(url: str, data_dir: str, user: str, session: str) -> None:
    async def never(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    settings = settings_for(url, data_dir)
    async with MemoryManager.open(settings, extractor=LLMExtractor(FunctionModel(never))) as memory:
        await memory.add_message(
            session, Message(role="user", content="Recuerda que prefiero latón para los casquillos."), user_id=user
        )
        scheduled = await memory.schedule_extraction(session, user)
        print(scheduled.job_id, flush=True)
        await asyncio.sleep(3600)


async def work(url: str, data_dir: str, log: str) -> None:
    async def logged(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        markers = sorted(set(MARKER.findall(prompt_of(messages))))
        # O_APPEND, one write per call: the lines of two processes never interleave.
        line = "".join(f"{m} {os.getpid()}\n" for m in markers).encode()
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        await asyncio.sleep(0.05)
        return fact_response(info, [f"Lleva el encargo {m}" for m in markers], "fact")

    # No candidate facts in the prompt: the markers it holds are the job's own messages'.
    settings = settings_for(url, data_dir, background_concurrency=2, extraction_candidate_facts=0)
    async with MemoryManager.open(settings, extractor=LLMExtractor(FunctionModel(logged))):
        await asyncio.sleep(3600)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    asyncio.run(hang(*args) if mode == "hang" else work(*args))
