"""Long-term memory stores: the `LongTermStore` protocol and its backends."""

from .base import ContextQuery, LongTermStore
from .embedded import EmbeddedPostgres
from .memory import InMemoryStore
from .postgres import PostgresStore
from .records import MemoryItem, MemoryRecord

__all__ = [
    "ContextQuery",
    "EmbeddedPostgres",
    "InMemoryStore",
    "LongTermStore",
    "MemoryItem",
    "MemoryRecord",
    "PostgresStore",
]
