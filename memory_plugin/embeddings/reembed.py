"""Rebuild the vectors of facts that have none of the current embedding model (`memory-plugin reembed`).

After a model change every fact still carries a vector of the old model (or none, if the embedder failed
when it was written); searches ignore those vectors — two models' vectors are never compared — and find
such facts by text only. `reembed_user` embeds a user's backlog in batches and stores the new vectors with
the user's own identity (RLS applies as for any write); `users_with_backlog` lists, through the service
path (an administrative connection, which sees every user), who has a backlog and how long it is.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from ..database.pooler import connection_kwargs
from ..database.reach import connect
from ..retrieval.search import EmbeddingUpdate
from ..store.base import LongTermStore
from .embedder import MemoryEmbedder

__all__ = ["USERS_WITH_BACKLOG_SQL", "reembed_user", "users_with_backlog"]

USERS_WITH_BACKLOG_SQL = (
    "select user_id, count(*) as facts from public.memory_search_docs"
    " where embedding_model is distinct from %s group by user_id order by user_id"
)


async def users_with_backlog(admin_url: str, model: str) -> list[tuple[UUID, int]]:
    """(user, facts without a `model` vector) for every user with some, through an administrative connection."""
    pooled = connection_kwargs(admin_url)
    async with await connect(admin_url, what="as administrator ", autocommit=True, **pooled) as conn:
        cursor = await conn.execute(USERS_WITH_BACKLOG_SQL, (model,))
        return [(row[0], int(row[1])) for row in await cursor.fetchall()]


async def reembed_user(
    store: LongTermStore,
    embedder: MemoryEmbedder,
    user_id: UUID,
    *,
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Embed every fact of `user_id` lacking a vector of `embedder.name`, `embedder.batch_size` at a time;
    returns how many got one. Raises `EmbeddingError` / `StoreError` (what is done stays done: run it again
    to continue)."""
    done = 0
    # Facts a batch could not update (their text changed meanwhile) are not retried with the same text; the
    # limit grows with them so they cannot hide the rest of the backlog.
    tried: set[tuple[UUID, str]] = set()
    while True:
        fetched = await store.embedding_backlog(user_id, embedder.name, limit=embedder.batch_size * 4 + len(tried))
        backlog = [b for b in fetched if (b.memory_id, b.content) not in tried]
        if not backlog:
            return done
        for start in range(0, len(backlog), embedder.batch_size):
            batch = backlog[start : start + embedder.batch_size]
            vectors = await embedder.embed_documents([b.content for b in batch])
            stored = await store.set_embeddings(
                user_id,
                embedder.name,
                [EmbeddingUpdate(b.content_hash, b.content, v) for b, v in zip(batch, vectors, strict=True)],
            )
            # A fact whose text changed meanwhile is skipped (its new text is in the next backlog read).
            tried.update((b.memory_id, b.content) for b in batch)
            done += stored
            if on_progress is not None:
                on_progress(len(batch))
