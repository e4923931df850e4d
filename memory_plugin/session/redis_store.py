"""`RedisSessionStore`: short-term sessions in Redis, shared by every worker process (`MEMORY_SESSION_BACKEND=redis`).

The same contract as the RAM `SessionStore` and the Postgres store (`session/base.py`): a window of the last
`max_messages` messages, entities merged once per kind (case- and accent-insensitively), intents once, an
inactivity TTL, a per-user session cap (the user's least recently active sessions go first) and the owner rules
(sessions keyed by (owner, session id); `resolve_owner` for the calls without a user).

Per session, two keys under its owner (`…:session:<owner>:<id>:…`, `-` for anonymous): a hash (`…:meta`: owner,
messages seen, last activity, entities and intents as JSON) and a list (`…:messages`: the window, trimmed with
`LTRIM` in the same transaction as the `RPUSH`). A set per session id (`…:owners:<id>`) lists the owners using
it, which resolves the calls without a user. Every access
that counts as activity sets both keys' native TTL (`PEXPIRE`), so an idle session disappears from Redis by
itself, with no sweep; the stored last activity (seconds of `clock`) is checked too, so an expired session is
never served in the moment before Redis drops it. Two sorted sets index sessions by last activity: one per
user (the per-user cap) and one for all (`len`, `expire`; members `<owner>/<id>`). `expire` clears the idle
sessions' leftovers in bounded batches, each one server-side script that checks the session is still idle,
so it ends while other workers write.

Each operation is one optimistic transaction: `WATCH` the session's keys (and its user's index), read, decide
(the owner rule, the entity limits) in Python, then `MULTI`/`EXEC` the writes; a concurrent write to a watched
key makes `EXEC` fail and the operation re-run, so two processes appending to one session lose nothing.
Synchronous, like the `SessionBackend` protocol. For one Redis server (or a primary); not Redis Cluster (an
eviction touches other sessions' keys). Not implemented here: the RAM store's byte budgets (the per-user cap
bounds a user; Redis's own `maxmemory` bounds the server).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from uuid import UUID

from ..errors import MemoryPluginError, StoreUnavailableError
from ..models import Message, ShortTermMemory
from ..settings import MemorySettings
from .base import SessionLimits, resolve_owner, session_limits

try:
    import redis
    from redis.client import Pipeline
except ImportError as exc:  # pragma: no cover - the `redis` extra is part of the dev install
    raise ImportError(
        "MEMORY_SESSION_BACKEND=redis needs the redis client: pip install 'memory-plugin[redis]'"
    ) from exc

__all__ = ["RedisSessionStore", "redis_sessions_from_settings"]

_ANONYMOUS = ""
"""The `owner` of a session started without a user."""

_SWEEP_BATCH = 500
"""Idle sessions `expire` removes per round trip: 20,000 idle sessions take 40 short scripts, each holding the
server for about a millisecond, instead of one transaction a concurrent writer restarts forever."""

# Removes the idle sessions of one batch, each only if still idle: ZSCORE in the all-sessions index at most the
# cutoff (a session touched since the batch was read has a newer score and stays). Atomic on the server, so it
# needs no WATCH that a writer elsewhere would break. KEYS: the index, then 4 per session (meta, messages,
# owners, user index); ARGV: the cutoff, then 3 per session (member, owner, session id).
_SWEEP_SCRIPT = """
local removed = 0
local cutoff = tonumber(ARGV[1])
for i = 0, (#ARGV - 1) / 3 - 1 do
  local member, owner, sid = ARGV[2 + 3 * i], ARGV[3 + 3 * i], ARGV[4 + 3 * i]
  local score = redis.call('ZSCORE', KEYS[1], member)
  if score and tonumber(score) <= cutoff then
    redis.call('DEL', KEYS[2 + 4 * i], KEYS[3 + 4 * i])
    redis.call('SREM', KEYS[4 + 4 * i], owner)
    redis.call('ZREM', KEYS[1], member)
    if owner ~= '' then redis.call('ZREM', KEYS[5 + 4 * i], sid) end
    removed = removed + 1
  end
end
return removed
"""


def _text(value: object) -> str:
    """A Redis reply as text (the client decodes replies; bytes only without `decode_responses`)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _owner(user_id: UUID | None) -> str:
    return _ANONYMOUS if user_id is None else str(user_id)


def _user(owner: str) -> UUID | None:
    return None if owner == _ANONYMOUS else UUID(owner)


class RedisSessionStore(SessionLimits):
    """A `SessionBackend` on Redis. Create with `RedisSessionStore.connect(url, ...)`; `close()` at the end.

    `prefix` namespaces every key (several applications, or test runs, on one server)."""

    blocking: bool = True
    """Always: every call is a transaction on Redis (`off_the_loop` runs it in a worker thread)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "memory_plugin",
        max_messages: int = 20,
        ttl_seconds: float = 3600.0,
        max_sessions_per_user: int = 100,
        max_entity_values_per_kind: int = 50,
        max_entity_values: int = 200,
        max_intents: int = 50,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            max_messages=max_messages,
            ttl_seconds=ttl_seconds,
            max_sessions_per_user=max_sessions_per_user,
            max_entity_values_per_kind=max_entity_values_per_kind,
            max_entity_values=max_entity_values,
            max_intents=max_intents,
        )
        self._redis = client
        self.prefix = prefix
        self._clock = clock
        # Native expiry in whole milliseconds, at least one.
        self._ttl_ms = max(1, round(ttl_seconds * 1000))
        self._sweep = client.register_script(_SWEEP_SCRIPT)

    @classmethod
    def connect(cls, url: str, **options: Any) -> RedisSessionStore:
        """A store on a new client for `url` (`redis://host:port/db`), after checking that the server answers."""
        try:
            client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=5, socket_connect_timeout=5)
        except ValueError as exc:  # no scheme, an unknown one, a bad port
            raise MemoryPluginError(f"MEMORY_REDIS_URL is not a Redis URL (redis://host:6379/0): {exc}") from None
        try:
            client.ping()
        except redis.RedisError as exc:
            client.close()
            raise StoreUnavailableError(f"cannot connect to Redis for sessions: {exc}") from exc
        return cls(client, **options)

    def close(self) -> None:
        """Close the client's connections."""
        self._redis.close()

    # --- keys ----------------------------------------------------------------------------------------------------
    def _meta(self, session_id: str, owner: str) -> str:
        return f"{self.prefix}:session:{owner or '-'}:{session_id}:meta"

    def _messages(self, session_id: str, owner: str) -> str:
        return f"{self.prefix}:session:{owner or '-'}:{session_id}:messages"

    def _owners(self, session_id: str) -> str:
        return f"{self.prefix}:owners:{session_id}"

    def _user_index(self, owner: str) -> str:
        return f"{self.prefix}:user:{owner}:sessions"

    @property
    def _all_index(self) -> str:
        return f"{self.prefix}:sessions"

    # --- one optimistic transaction per operation ------------------------------------------------------------------
    def _transaction(self, operation: Callable[[Pipeline], Any], *keys: str) -> Any:
        """Run `operation` with `keys` watched, again after a concurrent change; Redis failures as
        `StoreUnavailableError`."""
        try:
            return self._redis.transaction(operation, *keys, value_from_callable=True)
        except redis.RedisError as exc:
            raise StoreUnavailableError(f"Redis failed during a session operation: {exc}") from exc

    def _read_meta(self, pipe: Pipeline, session_id: str, owner: str, now: float) -> dict[str, str] | None:
        """The session's meta (immediate mode); None when unknown or idle past the TTL (its id is free)."""
        meta = {_text(k): _text(v) for k, v in pipe.hgetall(self._meta(session_id, owner)).items()}
        if "owner" not in meta or float(meta["last_active"]) <= now - self.ttl_seconds:
            return None
        return meta

    def _resolve(self, pipe: Pipeline, session_id: str, user_id: UUID | None, now: float, *, write: bool) -> str:
        """The owner of the session the call means (`resolve_owner`), then every key it touches watched."""
        owners = self._owners(session_id)
        if user_id is None:
            pipe.watch(owners)  # type: ignore[no-untyped-call]
            live = {
                _user(owner)
                for owner in (_text(o) for o in pipe.smembers(owners))
                if self._read_meta(pipe, session_id, owner, now) is not None
            }
            owner = _owner(resolve_owner(session_id, None, live, write=write))
        else:
            owner = _owner(user_id)
        keys = [self._meta(session_id, owner), self._messages(session_id, owner), owners]
        if owner != _ANONYMOUS:
            keys.append(self._user_index(owner))
        pipe.watch(*keys)  # type: ignore[no-untyped-call]
        return owner

    def _queue_create(self, pipe: Pipeline, session_id: str, owner: str, now: float) -> dict[str, str]:
        """Queue a fresh session (replacing an expired one) and, for a user at the cap, the eviction of their
        least recently active live sessions; returns the new meta. The user's index must be watched."""
        evicted: list[str] = []
        if owner != _ANONYMOUS:
            index = self._user_index(owner)
            # Live by the index's scores: entries of sessions gone idle (or dropped by Redis) do not count.
            indexed = pipe.zrevrangebyscore(index, "+inf", f"({now - self.ttl_seconds}")
            live = [_text(s) for s in indexed if _text(s) != session_id]
            evicted = live[self.max_sessions_per_user - 1 :]
        pipe.multi()
        if owner != _ANONYMOUS:
            pipe.zremrangebyscore(self._user_index(owner), "-inf", now - self.ttl_seconds)
        for other in evicted:
            self._queue_forget(pipe, other, owner)
        pipe.delete(self._messages(session_id, owner))  # an expired session's window
        meta = {"owner": owner, "seen": "0", "last_active": repr(now), "entities": "{}", "intents": "[]"}
        fields: dict[Any, Any] = dict(meta)
        pipe.hset(self._meta(session_id, owner), mapping=fields)
        pipe.sadd(self._owners(session_id), owner)
        return meta

    def _queue_touch(self, pipe: Pipeline, session_id: str, owner: str, now: float) -> None:
        """Queue the activity: last activity, native TTLs, the indexes."""
        pipe.hset(self._meta(session_id, owner), "last_active", repr(now))
        pipe.pexpire(self._meta(session_id, owner), self._ttl_ms)
        pipe.pexpire(self._messages(session_id, owner), self._ttl_ms)
        pipe.pexpire(self._owners(session_id), self._ttl_ms)
        pipe.zadd(self._all_index, {f"{owner}/{session_id}": now})
        if owner != _ANONYMOUS:
            pipe.zadd(self._user_index(owner), {session_id: now})
            pipe.pexpire(self._user_index(owner), self._ttl_ms)

    def _write(
        self,
        session_id: str,
        user_id: UUID | None,
        plan: Callable[[dict[str, str] | None], Callable[[Pipeline, str, dict[str, str]], Any]],
    ) -> Any:
        """One write: `plan(live meta or None)` decides while the keys are watched (it raises to refuse) and
        returns what to queue; the session is created if needed, the writes are queued and the activity
        recorded, all in one `MULTI`."""

        def operation(pipe: Pipeline) -> Any:
            now = self._clock()
            owner = self._resolve(pipe, session_id, user_id, now, write=True)
            meta = self._read_meta(pipe, session_id, owner, now)
            queue = plan(meta)
            if meta is None:
                meta = self._queue_create(pipe, session_id, owner, now)
            else:
                pipe.multi()
            result = queue(pipe, owner, meta)
            self._queue_touch(pipe, session_id, owner, now)
            return result

        return self._transaction(operation)

    # --- SessionBackend ------------------------------------------------------------------------------------------
    def add_message(self, session_id: str, message: Message, *, user_id: UUID | None = None) -> int:
        """Append `message` (creating the session, bound to `user_id`); returns the messages it has seen."""
        payload = json.dumps(message.model_dump(mode="json"), ensure_ascii=False)

        def plan(_: dict[str, str] | None) -> Callable[[Pipeline, str, dict[str, str]], int]:
            def queue(pipe: Pipeline, owner: str, meta: dict[str, str]) -> int:
                pipe.rpush(self._messages(session_id, owner), payload)
                pipe.ltrim(self._messages(session_id, owner), -self.max_messages, -1)  # the window, atomically
                pipe.hincrby(self._meta(session_id, owner), "seen", 1)
                return int(meta["seen"]) + 1

            return queue

        return int(self._write(session_id, user_id, plan))

    def update_entities(
        self, session_id: str, entities: Mapping[str, str | Iterable[str]], *, user_id: UUID | None = None
    ) -> None:
        """Merge entity values by kind, without duplicates; all or nothing past the limits."""

        def plan(meta: dict[str, str] | None) -> Callable[[Pipeline, str, dict[str, str]], None]:
            # Stored as kind -> values in first-seen order.
            merged = self.merged_entities(session_id, json.loads(meta["entities"]) if meta else {}, entities)

            def queue(pipe: Pipeline, owner: str, _: dict[str, str]) -> None:
                pipe.hset(self._meta(session_id, owner), "entities", json.dumps(merged, ensure_ascii=False))

            return queue

        self._write(session_id, user_id, plan)

    def add_intent(self, session_id: str, intent: str, *, user_id: UUID | None = None) -> None:
        """Record an intent (once, first-seen order); a new one past `max_intents` raises `SessionLimitError`."""
        text = intent.strip()

        def plan(meta: dict[str, str] | None) -> Callable[[Pipeline, str, dict[str, str]], None]:
            intents: list[str] = json.loads(meta["intents"]) if meta else []
            self.check_intent_room(session_id, intents, text)
            updated = intents if text in intents else [*intents, text]

            def queue(pipe: Pipeline, owner: str, _: dict[str, str]) -> None:
                pipe.hset(self._meta(session_id, owner), "intents", json.dumps(updated, ensure_ascii=False))

            return queue

        self._write(session_id, user_id, plan)

    def snapshot(self, session_id: str, *, user_id: UUID | None = None, bind: bool = False) -> ShortTermMemory:
        """A copy of the session's state (empty when unknown or expired); counts as activity. With `bind` and a
        `user_id`, an unknown session is created for that user."""

        def operation(pipe: Pipeline) -> ShortTermMemory:
            now = self._clock()
            owner = self._resolve(pipe, session_id, user_id, now, write=False)
            meta = self._read_meta(pipe, session_id, owner, now)
            if meta is None:
                if bind and user_id is not None:
                    self._queue_create(pipe, session_id, owner, now)
                    self._queue_touch(pipe, session_id, owner, now)
                else:
                    pipe.multi()
                return ShortTermMemory()
            messages = [_text(m) for m in pipe.lrange(self._messages(session_id, owner), 0, -1)]
            pipe.multi()
            self._queue_touch(pipe, session_id, owner, now)
            return ShortTermMemory(
                messages=[Message.model_validate_json(m) for m in messages],
                entities=json.loads(meta["entities"]),
                intents=json.loads(meta["intents"]),
            )

        result: ShortTermMemory = self._transaction(operation)
        return result

    def messages_seen(self, session_id: str, *, user_id: UUID | None = None) -> int:
        """Messages the session has seen in total (0 when unknown or expired)."""

        def operation(pipe: Pipeline) -> int:
            now = self._clock()
            meta = self._read_meta(pipe, session_id, self._resolve(pipe, session_id, user_id, now, write=False), now)
            pipe.multi()
            return int(meta["seen"]) if meta else 0

        return int(self._transaction(operation))

    def drop(self, session_id: str, *, user_id: UUID | None = None) -> bool:
        """Forget the session now; returns whether it existed."""

        def operation(pipe: Pipeline) -> bool:
            now = self._clock()
            owner = self._resolve(pipe, session_id, user_id, now, write=False)
            meta = self._read_meta(pipe, session_id, owner, now)
            pipe.multi()
            if meta is None:
                return False
            self._queue_forget(pipe, session_id, owner)
            return True

        return bool(self._transaction(operation))

    def drop_user(self, user_id: UUID) -> int:
        """Forget every session of `user_id` now (an erasure: the database's rows are deleted by
        `MemoryAdmin.erase_user`, which cannot reach Redis); returns how many there were."""
        owner = _owner(user_id)
        index = self._user_index(owner)

        def operation(pipe: Pipeline) -> int:
            sessions = [_text(s) for s in pipe.zrange(index, 0, -1)]
            mine = [s for s in sessions if pipe.exists(self._meta(s, owner))]
            pipe.multi()
            for session_id in sessions:
                self._queue_forget(pipe, session_id, owner)
            pipe.delete(index)
            return len(mine)

        return int(self._transaction(operation, index))

    def _queue_forget(self, pipe: Pipeline, session_id: str, owner: str) -> None:
        pipe.delete(self._meta(session_id, owner), self._messages(session_id, owner))
        pipe.srem(self._owners(session_id), owner)
        pipe.zrem(self._all_index, f"{owner}/{session_id}")
        if owner != _ANONYMOUS:
            pipe.zrem(self._user_index(owner), session_id)

    def __len__(self) -> int:
        """Live sessions (all users)."""
        try:
            return int(self._redis.zcount(self._all_index, f"({self._clock() - self.ttl_seconds}", "+inf"))
        except redis.RedisError as exc:
            raise StoreUnavailableError(f"Redis failed during a session operation: {exc}") from exc

    def expire(self) -> int:
        """Delete every session idle for longer than the TTL (Redis drops idle keys by itself; this also clears
        the indexes, and sessions idle by `clock`); returns how many.

        Bounded while other processes write: the sessions idle at the call's cutoff go in batches of
        `_SWEEP_BATCH` (oldest first), each removed by one script only if still idle; a session touched
        meanwhile gets a score past the cutoff, so every round shrinks the set of due sessions and the sweep
        ends after about (idle sessions / batch) rounds."""
        cutoff = self._clock() - self.ttl_seconds
        removed = 0
        try:
            while True:
                oldest = self._redis.zrangebyscore(self._all_index, "-inf", cutoff, start=0, num=_SWEEP_BATCH)
                due = [_text(m) for m in oldest]
                if not due:
                    return removed
                keys: list[str] = [self._all_index]
                args: list[str | float] = [cutoff]
                for member in due:
                    owner, _, session_id = member.partition("/")
                    keys += [
                        self._meta(session_id, owner),
                        self._messages(session_id, owner),
                        self._owners(session_id),
                        self._user_index(owner),
                    ]
                    args += [member, owner, session_id]
                removed += int(self._sweep(keys=keys, args=args))
                if len(due) < _SWEEP_BATCH:
                    return removed
        except redis.RedisError as exc:
            raise StoreUnavailableError(f"Redis failed during a session operation: {exc}") from exc


def redis_sessions_from_settings(settings: MemorySettings) -> RedisSessionStore:
    """The Redis session store `settings` describe (`MEMORY_REDIS_URL`; window, TTL, per-user cap, limits)."""
    if settings.redis_url is None:
        raise MemoryPluginError("MEMORY_SESSION_BACKEND=redis needs MEMORY_REDIS_URL (e.g. redis://localhost:6379/0)")
    return RedisSessionStore.connect(settings.redis_url.get_secret_value(), **session_limits(settings))
