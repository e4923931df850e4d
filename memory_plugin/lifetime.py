"""A `MemoryManager` opened from settings on first use and closed with the agent (`MemoryCapability.from_settings`).

pydantic-ai enters an agent's toolsets for `async with agent:` and for each run: `ManagerLifetime` is the
toolset (with no tools) that counts those entries, so the manager opened by the first stays open across runs
inside `async with agent:` and is closed when the last one exits.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from .manager import MemoryManager
from .settings import MemorySettings

__all__ = ["ManagerLifetime", "ManagerOpener"]


@dataclass
class ManagerOpener:
    """Opens one manager from `settings` when first asked, and closes it when the last user releases it."""

    settings: MemorySettings | None = None
    """None: `MemorySettings()` (the environment)."""
    _manager: MemoryManager | None = field(default=None, init=False, repr=False)
    _users: int = field(default=0, init=False, repr=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    async def manager(self) -> MemoryManager:
        """The open manager (opened now if needed)."""
        async with self._lock:
            if self._manager is None or self._manager.closed:
                self._manager = await MemoryManager.create(self.settings)
            return self._manager

    async def acquire(self) -> None:
        """One more user (the agent's `async with`, or a run): opens the manager."""
        await self.manager()
        self._users += 1

    async def release(self) -> None:
        """One user less: the last one closes the manager (background work drained, `MemoryManager.close`)."""
        self._users -= 1
        if self._users > 0:
            return
        async with self._lock:
            manager, self._manager = self._manager, None
        if manager is not None:
            await manager.close()


@dataclass
class ManagerLifetime(AbstractToolset[Any]):
    """A toolset without tools whose `async with` holds the opener's manager open."""

    opener: ManagerOpener

    @property
    def id(self) -> str | None:
        """One per opener."""
        return f"memory_plugin-lifetime-{id(self.opener)}"

    async def __aenter__(self) -> ManagerLifetime:
        await self.opener.acquire()
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        await self.opener.release()
        return None

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """No tools."""
        return {}

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Never called (no tools)."""
        raise NotImplementedError(name)
