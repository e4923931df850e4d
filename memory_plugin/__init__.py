"""memory_plugin: conversational memory for pydantic-ai agents, persisted in Supabase/Postgres.

from memory_plugin import MemoryManager, MemorySettings

async with MemoryManager.open(MemorySettings()) as memory:
    ctx = await memory.get_memory_context("session-1", user_id)
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from .errors import (
    EncryptionKeyError,
    ExtractionError,
    IdempotencyKeyReusedError,
    InvalidMemoryInputError,
    ManagerClosedError,
    MemoryLimitError,
    MemoryPluginError,
    SessionAmbiguousError,
    SessionLimitError,
    SessionOwnershipError,
    StatementLimitError,
    StoreError,
    StoreUnavailableError,
)

if TYPE_CHECKING:
    from .capability import MemoryCapability, MemoryDeps
    from .context.receipt import ContextReceipt
    from .formatting import format_memory_for_agent
    from .manager import MemoryManager, MemoryStats
    from .models import (
        FactCategory,
        FactSource,
        LongTermMemory,
        MemorizedFact,
        MemoryContext,
        MemoryUpdate,
        Message,
        ProjectRecord,
        RequestPattern,
        ShortTermMemory,
        UserPreferences,
    )
    from .outage import ResilientStore
    from .quality import WriteOutcome
    from .rows import MemoryRecord
    from .session import SessionStore
    from .settings import MemorySettings
    from .store import InMemoryStore, LongTermStore, PostgresStore, SupabaseStore
    from .store.status import BackendStatus
    from .tools import memory_toolset
    from .write.notes import Note

__all__ = [
    "BackendStatus",
    "ContextReceipt",
    "EncryptionKeyError",
    "ExtractionError",
    "FactCategory",
    "FactSource",
    "IdempotencyKeyReusedError",
    "InMemoryStore",
    "InvalidMemoryInputError",
    "LongTermMemory",
    "LongTermStore",
    "ManagerClosedError",
    "MemorizedFact",
    "MemoryCapability",
    "MemoryContext",
    "MemoryDeps",
    "MemoryLimitError",
    "MemoryManager",
    "MemoryPluginError",
    "MemoryRecord",
    "MemorySettings",
    "MemoryStats",
    "MemoryUpdate",
    "Message",
    "Note",
    "PostgresStore",
    "ProjectRecord",
    "RequestPattern",
    "ResilientStore",
    "SessionAmbiguousError",
    "SessionLimitError",
    "SessionOwnershipError",
    "SessionStore",
    "ShortTermMemory",
    "StatementLimitError",
    "StoreError",
    "StoreUnavailableError",
    "SupabaseStore",
    "UserPreferences",
    "WriteOutcome",
    "format_memory_for_agent",
    "memory_toolset",
]

_LAZY: dict[str, str] = {
    "BackendStatus": "store.status",
    "ContextReceipt": "context.receipt",
    "FactCategory": "models",
    "FactSource": "models",
    "InMemoryStore": "store",
    "LongTermMemory": "models",
    "LongTermStore": "store",
    "MemorizedFact": "models",
    "MemoryCapability": "capability",
    "MemoryContext": "models",
    "MemoryDeps": "capability",
    "MemoryManager": "manager",
    "MemoryRecord": "rows",
    "MemorySettings": "settings",
    "MemoryStats": "manager",
    "MemoryUpdate": "models",
    "Message": "models",
    "Note": "write.notes",
    "PostgresStore": "store",
    "ProjectRecord": "models",
    "RequestPattern": "models",
    "ResilientStore": "outage",
    "SessionStore": "session",
    "ShortTermMemory": "models",
    "SupabaseStore": "store",
    "UserPreferences": "models",
    "WriteOutcome": "quality",
    "format_memory_for_agent": "formatting",
    "memory_toolset": "tools",
}
"""Public name -> the submodule that defines it, imported on first access (`from memory_plugin import X`
works as before). Importing them all up front cost 1.2 s (pydantic-ai alone 1.1 s) in every process that
only needed one submodule, such as the CLI's `status`."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        # `import memory_plugin` then `memory_plugin.store.X` worked when every submodule loaded up front.
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f".{name}", __name__)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__version__ = "0.1.0"
