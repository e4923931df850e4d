"""Chats that outlive the process: full and model-visible histories, compaction, summaries, titles, search."""

from .compaction import CompactionPolicy
from .conversations import PostgresConversationStore
from .memory import InMemoryChatStore
from .postgres import PostgresChatStore
from .rows import ChatHit, ChatRow
from .service import ChatMatch, ChatService, from_json, title_needs_update, to_json
from .store import ChatSearch, ChatStore, SummaryUpdate
from .summarizer import AgentSummarizer, ChatSummarizer, ExtractiveSummarizer

__all__ = [
    "AgentSummarizer", "ChatHit", "ChatMatch", "ChatRow", "ChatSearch", "ChatService", "ChatStore",
    "ChatSummarizer", "CompactionPolicy", "ExtractiveSummarizer", "InMemoryChatStore", "PostgresChatStore",
    "PostgresConversationStore", "SummaryUpdate", "from_json", "title_needs_update", "to_json",
]  # fmt: skip
