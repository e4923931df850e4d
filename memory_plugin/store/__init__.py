"""Long-term memory stores: the `LongTermStore` protocol (`base.py`) and one file per backend."""

from .base import ContextQuery, LongTermStore
from .memory import InMemoryStore
from .postgres import PostgresStore
from .supabase import AccessTokenProvider, SupabaseStore

__all__ = [
    "AccessTokenProvider",
    "ContextQuery",
    "InMemoryStore",
    "LongTermStore",
    "PostgresStore",
    "SupabaseStore",
]
