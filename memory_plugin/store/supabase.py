"""`SupabaseStore`: the long-term store through a Supabase project's REST API (PostgREST), via supabase-py.

For deployments that have only the project URL, the anon key and each user's access token (JWT), not a
database connection string. It calls the same SQL functions as `PostgresStore` (`/rest/v1/rpc/
memory_upsert_items`, `/rest/v1/rpc/memory_context`) and reads and deletes `user_memory` rows with plain
table requests filtered by `user_id`; row-level security decides what each request may touch.

Identity: every user-scoped request carries `Authorization: Bearer <that user's token>` and
`apikey: <anon key>`, so PostgREST runs it as `authenticated` with the user's claims. The token is set on
a per-request view of the shared PostgREST client (`client.schema(...).auth(token)`: a copy of the headers
over the same connection pool), never on the shared client, so concurrent requests of different users
cannot pick up each other's token.
"""

from __future__ import annotations

import base64
import binascii
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

import httpx

from ..database.calls import bound_refusal
from ..errors import StoreError, StoreUnavailableError
from ..quality.rules import WriteRules
from ..retrieval.scored import ScoredMemory
from ..retrieval.search import (
    BacklogItem,
    EmbeddingUpdate,
    SearchQuery,
    record_from_json,
    search_params,
)
from ..rows import MemoryItem, MemoryKind, MemoryRecord
from ..settings import MemorySettings
from .base import DEFAULT_WRITE_RULES, ContextQuery, StoreBase

if TYPE_CHECKING:
    from postgrest import AsyncPostgrestClient

    from supabase import AsyncClient

__all__ = ["AccessTokenProvider", "SupabaseStore"]

AccessTokenProvider = str | Callable[[UUID], Awaitable[str] | str]
"""A user's current access token (JWT): one fixed token (a single-user process), or a function of the user
id returning it, sync or async (typically read from the user's session, refreshed by the application)."""

TABLE = "user_memory"
SCHEMA = "public"
_TIMESTAMP_COLUMNS = ("created_at", "updated_at", "last_reinforced_at")
_OPTIONAL_TIMESTAMP_COLUMNS = ("occurred_at", "expires_at", "invalid_at", "archived_at")


class _ServerError(Exception):
    """A 5xx answer. Raised from the HTTP client's response hook because postgrest-py's `APIError` does not
    keep the HTTP status, and the status is what separates "unavailable" from "refused"."""

    def __init__(self, status: int, body: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {body[:500]}")


async def _raise_for_server_error(response: httpx.Response) -> None:
    if response.status_code >= 500:
        await response.aread()
        raise _ServerError(response.status_code, response.text)


def _token_subject(token: str) -> UUID | None:
    """The `sub` claim of a JWT, read without checking the signature (PostgREST checks it); None if absent."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return UUID(claims["sub"])
    except (IndexError, KeyError, TypeError, ValueError, binascii.Error):
        return None


def _regex_literal(text: str) -> str:
    """`text` as a POSIX regular expression matching itself. `imatch` rather than `ilike`: PostgREST turns
    every `*` of an `ilike` pattern into `%`, so a literal `*` could not be searched for."""
    # In PostgreSQL's regexes a backslash before a non-alphanumeric character makes it literal.
    return "".join(ch if ch.isalnum() else f"\\{ch}" for ch in text)


def _record(row: Any) -> MemoryRecord:
    """A JSON row (uuids and timestamps as strings) as a `MemoryRecord` (every timestamp and uuid column,
    including the validity ones: `occurred_at`, `expires_at`, `invalid_at`, `archived_at`, `superseded_by`)."""
    try:
        return record_from_json(row)
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"unexpected row from the Supabase API: {exc!r}") from exc


def _records(data: Any) -> list[MemoryRecord]:
    if not isinstance(data, list):
        raise StoreError(f"unexpected answer from the Supabase API: {type(data).__name__}, not a list of rows")
    return [_record(row) for row in data]


class SupabaseStore(StoreBase):
    """A `LongTermStore` over a Supabase project's REST API, as each user (their JWT), under RLS.

    Args:
        url: The project URL, e.g. `https://abcd.supabase.co`.
        anon_key: The project's anon key (sent as `apikey`, and as the bearer of `ping` only).
        access_token: The user's access token, or `f(user_id) -> token` (sync or async), called before
            every request: the token must be that user's (its `sub` is checked; a mismatch raises
            `StoreError` before anything is sent).
        timeout_seconds: Timeout of each request (connect, read, write, pool).
        transport: The HTTP transport under the client (tests; default: httpx's network transport).

    Use it with `MemoryManager.open(settings, store=SupabaseStore(...))`. Failed requests raise
    `StoreUnavailableError` (network, timeout, any 5xx) or `StoreError` (4xx: bad or expired token,
    permission, constraint; the message holds PostgREST's code and message). Requests are not retried.
    """

    def __init__(
        self,
        url: str,
        anon_key: str,
        access_token: AccessTokenProvider,
        *,
        timeout_seconds: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        # Imported here: supabase-py (realtime, storage, auth) adds ~0.25 s to every `import memory_plugin`.
        from supabase import AsyncClient, AsyncClientOptions

        self._access_token = access_token
        # One HTTP client, owned here: explicit timeouts, and 5xx answers raised with their status.
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_seconds),
            transport=transport,
            event_hooks={"response": [_raise_for_server_error]},
        )
        # Built directly rather than with `acreate_client`, which would only look up a stored auth session:
        # this client never signs in (no session, no refresh timer), it only carries the users' tokens.
        self._client = AsyncClient(
            url,
            anon_key,
            AsyncClientOptions(
                headers={"Authorization": f"Bearer {anon_key}"},
                httpx_client=self._http,
                auto_refresh_token=False,
                persist_session=False,
                # No retries: postgrest-py sleeps 1, 2 then 4 s between them, while an agent is waiting.
                postgrest_client_retry=False,
            ),
        )
        self._closed = False

    @classmethod
    def from_settings(
        cls,
        settings: MemorySettings,
        *,
        access_token: AccessTokenProvider,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> SupabaseStore:
        """A store on `settings.supabase_url` / `supabase_anon_key` (`MEMORY_SUPABASE_*`), with the
        settings' timeout. Raises `ValueError` if the URL or the anon key is not set."""
        if settings.supabase_url is None or settings.supabase_anon_key is None:
            raise ValueError("SupabaseStore needs settings.supabase_url and settings.supabase_anon_key")
        return cls(
            settings.supabase_url,
            settings.supabase_anon_key.get_secret_value(),
            access_token,
            timeout_seconds=settings.supabase_timeout_seconds,
            transport=transport,
        )

    @property
    def backend_name(self) -> str:
        """Always "supabase"."""
        return "supabase"

    @property
    def client(self) -> AsyncClient:
        """The underlying supabase-py client. Its own headers carry only the anon key."""
        return self._client

    async def _as_user(self, user_id: UUID) -> AsyncPostgrestClient:
        """A PostgREST client for one request as `user_id`.

        `schema()` returns a new client sharing the HTTP connection pool with a copy of the headers, and
        `auth()` sets the bearer on that copy only: the shared client is never changed, so no other
        coroutine can see this user's token, whatever runs between the awaits.
        """
        if self._closed:
            raise StoreUnavailableError("the Supabase store is closed")
        try:
            token = self._access_token if isinstance(self._access_token, str) else self._access_token(user_id)
            if inspect.isawaitable(token):
                token = await token
        except Exception as exc:
            raise StoreError(f"no access token for user {user_id}: {exc!r}") from exc
        if not isinstance(token, str) or not token:
            raise StoreError(f"no access token for user {user_id}")
        # Defence in depth: RLS would refuse another user's rows anyway, but a provider handing out the
        # wrong token is a bug worth failing loudly on, before the token leaves the process.
        if _token_subject(token) != user_id:
            raise StoreError(f"the access token given for user {user_id} is not that user's (JWT `sub` differs)")
        return self._client.schema(SCHEMA).auth(token)

    async def _data(self, doing: str, request: Awaitable[Any]) -> Any:
        """Await one postgrest-py `execute()`, mapping failures to the plugin's errors."""
        from postgrest import APIError

        try:
            response = await request
        except _ServerError as exc:
            raise StoreUnavailableError(f"Supabase API failed while {doing}: {exc}") from exc
        except httpx.TransportError as exc:  # connection refused or reset, timeouts, DNS...
            raise StoreUnavailableError(f"Supabase API unreachable while {doing}: {exc!r}") from exc
        except APIError as exc:
            refusal = bound_refusal(exc.code, str(exc.message), exc.details, None)
            if refusal is not None:
                raise refusal from exc
            raise StoreError(f"Supabase API refused {doing}: {exc.code}: {exc.message}") from exc
        except httpx.HTTPError as exc:
            raise StoreError(f"Supabase API request failed while {doing}: {exc!r}") from exc
        return response.data

    async def upsert(
        self,
        user_id: UUID,
        items: Sequence[MemoryItem],
        rules: WriteRules = DEFAULT_WRITE_RULES,
        *,
        write_id: UUID | None = None,
    ) -> list[MemoryRecord]:
        """All items in one `memory_upsert_items` call. `write_id` (an idempotency key) is sent as
        `p_write_id` only when given."""
        if not items:
            return []
        params: dict[str, Any] = {
            "p_user_id": str(user_id),
            "p_items": [item.as_json() for item in items],
            "p_reinforcement_step": rules.reinforcement_step,
            "p_near_duplicate_threshold": rules.near_duplicate_threshold,
        }
        if write_id is not None:
            params["p_write_id"] = str(write_id)
        # Items carrying embeddings go through memory_upsert_embedded: the same upsert plus their vectors.
        model = next((i.embedding_model for i in items if i.embedding is not None), None)
        function = "memory_upsert_items"
        if model is not None:
            params["p_model"] = model
            params["p_embedding_threshold"] = rules.embedding_threshold
            function = "memory_upsert_embedded"
        api = await self._as_user(user_id)
        return _records(await self._data("writing memory", api.rpc(function, params).execute()))

    async def context(self, user_id: UUID, query: ContextQuery) -> list[MemoryRecord]:
        """One `memory_context` call."""
        w = query.weights
        params: dict[str, Any] = {
            "p_user_id": str(user_id),
            "p_max_facts": query.max_facts,
            "p_max_projects": query.max_projects,
            "p_max_patterns": query.max_patterns,
            "p_weight_importance": w.importance,
            "p_weight_confidence": w.confidence,
            "p_weight_recency": w.recency,
            "p_recency_window_days": w.recency_window_days,
            "p_half_life_days": query.decay.as_json(),
            "p_decay_floor": query.decay.floor,
            "p_max_rejections": query.max_rejections,
        }
        if query.now is not None:  # omitted: the function's default, now()
            params["p_now"] = query.now.isoformat()
        api = await self._as_user(user_id)
        return _records(await self._data("reading the context", api.rpc("memory_context", params).execute()))

    async def fact_history(
        self, user_id: UUID, *, at: datetime | None = None, include_invalid: bool = True, limit: int = 1000
    ) -> list[MemoryRecord]:
        """One `memory_fact_history` call."""
        params: dict[str, Any] = {"p_user_id": str(user_id), "p_include_invalid": include_invalid, "p_limit": limit}
        if at is not None:
            params["p_at"] = at.isoformat()
        api = await self._as_user(user_id)
        return _records(await self._data("reading fact history", api.rpc("memory_fact_history", params).execute()))

    async def count_facts(self, user_id: UUID) -> int:
        """One `memory_fact_count` call."""
        api = await self._as_user(user_id)
        data = await self._data("counting facts", api.rpc("memory_fact_count", {"p_user_id": str(user_id)}).execute())
        # A scalar function: the bare value, or a one-element list of it or of a row.
        value = data[0] if isinstance(data, list) and data else data
        if isinstance(value, dict):
            value = next(iter(value.values()), 0)
        return int(value or 0)

    async def list_records(
        self, user_id: UUID, *, kind: MemoryKind | None = None, limit: int = 1000
    ) -> list[MemoryRecord]:
        """The user's rows, newest first."""
        api = await self._as_user(user_id)
        request = api.from_(TABLE).select("*").eq("user_id", str(user_id))
        if kind is not None:
            request = request.eq("kind", kind)
        request = request.order("created_at", desc=True).order("id").limit(limit)
        return _records(await self._data("listing memory", request.execute()))

    async def search_text(self, user_id: UUID, text: str, *, limit: int = 10) -> list[MemoryRecord]:
        """Rows whose content contains `text`, ignoring case (`imatch` on an escaped literal)."""
        api = await self._as_user(user_id)
        request = (
            api.from_(TABLE)
            .select("*")
            .eq("user_id", str(user_id))
            .filter("content", "imatch", _regex_literal(text.strip()))
            .order("importance", desc=True)
            .order("confidence", desc=True)
            .order("last_reinforced_at", desc=True)
            .limit(limit)
        )
        return _records(await self._data("searching memory", request.execute()))

    async def search(self, user_id: UUID, query: SearchQuery) -> list[ScoredMemory]:
        """One `memory_search` call."""
        api = await self._as_user(user_id)
        data = await self._data("searching memory", api.rpc("memory_search", search_params(user_id, query)).execute())
        if not isinstance(data, list):
            raise StoreError(f"unexpected answer from the Supabase API: {type(data).__name__}, not a list of rows")
        try:
            return [ScoredMemory.from_search_row(r, record_from_json(r["memory"])) for r in data]
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"unexpected row from the Supabase API: {exc!r}") from exc

    async def set_embeddings(self, user_id: UUID, model: str, items: Sequence[EmbeddingUpdate]) -> int:
        """One `memory_set_embeddings` call."""
        if not items:
            return 0
        params: dict[str, Any] = {
            "p_user_id": str(user_id),
            "p_model": model,
            "p_items": [
                {"content_hash": i.content_hash, "content": i.content, "embedding": list(i.embedding)} for i in items
            ],
        }
        api = await self._as_user(user_id)
        data = await self._data("storing embeddings", api.rpc("memory_set_embeddings", params).execute())
        # PostgREST answers a scalar function with the bare value; tolerate a one-element list too.
        value = data[0] if isinstance(data, list) and data else data
        return int(value) if isinstance(value, int | float | str) else 0

    async def embedding_backlog(self, user_id: UUID, model: str, *, limit: int = 1000) -> list[BacklogItem]:
        """One `memory_embedding_backlog` call."""
        params: dict[str, Any] = {"p_user_id": str(user_id), "p_model": model, "p_limit": limit}
        api = await self._as_user(user_id)
        data = await self._data("listing the embedding backlog", api.rpc("memory_embedding_backlog", params).execute())
        return [BacklogItem(UUID(r["memory_id"]), r["content_hash"], r["content"]) for r in data or []]

    async def delete(self, user_id: UUID, record_id: UUID) -> bool:
        """Delete one of the user's rows (the deleted row comes back, so its presence is the answer)."""
        api = await self._as_user(user_id)
        request = api.from_(TABLE).delete().eq("user_id", str(user_id)).eq("id", str(record_id))
        return bool(_records(await self._data("deleting memory", request.execute())))

    async def ping(self) -> bool:
        """Whether PostgREST and the database answer: a zero-row read as `anon`. `anon` is refused the table,
        but that refusal comes from the database, so any answer below 500 means both are up."""
        if self._closed:
            return False
        request = self._client.schema(SCHEMA).from_(TABLE).select("id").limit(0)
        try:
            await self._data("pinging", request.execute())
        except StoreUnavailableError:
            return False
        except StoreError:
            return True
        return True

    async def close(self) -> None:
        """Close the HTTP client (every connection this store opened). Idempotent."""
        self._closed = True
        await self._http.aclose()
