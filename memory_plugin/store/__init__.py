"""Long-term memory stores: the `LongTermStore` protocol and its backends."""

from .base import ContextQuery, LongTermStore
from .embedded import EmbeddedPostgres
from .journal import WriteJournal
from .memory import InMemoryStore
from .postgres import PostgresStore
from .records import MemoryItem, MemoryRecord
from .resilient import BackendStatus, ResilientStore
from .supabase import AccessTokenProvider, SupabaseStore

__all__ = [
    "AccessTokenProvider",
    "BackendStatus",
    "ContextQuery",
    "EmbeddedPostgres",
    "InMemoryStore",
    "LongTermStore",
    "MemoryItem",
    "MemoryRecord",
    "PostgresStore",
    "ResilientStore",
    "SupabaseStore",
    "WriteJournal",
]
