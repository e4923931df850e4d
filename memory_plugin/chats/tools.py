"""`chat_toolset`: lets a model find the chat a user refers to ("volvamos al chat de los soportes anodizados").

Acts only on the chats of the user in the run's deps (`deps.user_id`), never on an id the model supplies. When
several chats fit about equally, the tool returns them for the model to ask which one, instead of guessing.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.toolsets import FunctionToolset

from .rows import ChatHit
from .service import ChatService

__all__ = ["chat_toolset"]


def _brief(hit: ChatHit) -> dict[str, Any]:
    return {
        "chat_id": str(hit.id),
        "title": hit.title or "",
        "summary": hit.summary_text[:200],
        "last_activity_at": hit.last_activity_at.isoformat(),
    }


def chat_toolset(chats: ChatService) -> FunctionToolset[object]:
    """A toolset with `find_chat`, bound to `chats`. Deps must carry `user_id`."""
    toolset: FunctionToolset[object] = FunctionToolset()

    @toolset.tool
    async def find_chat(ctx: RunContext[object], description: str) -> dict[str, Any]:
        """Find the user's earlier chat that `description` refers to (its topic, in the user's words).

        Returns `{"status": "found", "chat": …}` for one clear match, `{"status": "confirm", "candidates": […]}`
        when several fit (ask the user which one), or `{"status": "none"}`.
        """
        raw = getattr(ctx.deps, "user_id", None)
        if raw is None:
            raise ModelRetry("This conversation has no known user, so there are no earlier chats to search.")
        user_id = raw if isinstance(raw, UUID) else UUID(str(raw))
        match = await chats.find(user_id, description)
        if match.chosen is not None:
            return {"status": "found", "chat": _brief(match.chosen)}
        if match.candidates:
            return {"status": "confirm", "candidates": [_brief(h) for h in match.candidates]}
        return {"status": "none"}

    return toolset
