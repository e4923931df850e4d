"""memory_plugin: conversational memory for pydantic-ai agents, persisted in Supabase/Postgres.

from memory_plugin import MemoryManager, MemorySettings

async with MemoryManager.open(MemorySettings()) as memory:
    ctx = await memory.get_memory_context("session-1", user_id)
"""

from .capability import MemoryCapability, MemoryDeps
from .errors import (
    ExtractionError,
    InvalidMemoryInputError,
    ManagerClosedError,
    MemoryLimitError,
    MemoryPluginError,
    SessionLimitError,
    SessionOwnershipError,
    StoreError,
    StoreUnavailableError,
)
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
    "ExtractionError",
    "FactCategory",
    "FactSource",
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
    "SessionLimitError",
    "SessionOwnershipError",
    "SessionStore",
    "ShortTermMemory",
    "StoreError",
    "StoreUnavailableError",
    "SupabaseStore",
    "UserPreferences",
    "WriteOutcome",
    "format_memory_for_agent",
    "memory_toolset",
]

__version__ = "0.1.0"
