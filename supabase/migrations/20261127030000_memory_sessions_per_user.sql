-- Short-term sessions keyed by (session id, owner) instead of session id alone: two users may each have a
-- session `chat-1`, so no one can take an id from another user for the session's TTL. Anonymous sessions
-- (owner null) are a namespace of their own (`nulls not distinct`). Existing rows keep their owner.

alter table memory_private.memory_sessions drop constraint memory_sessions_pkey;
alter table memory_private.memory_sessions alter column session_id set not null;
alter table memory_private.memory_sessions
    add constraint memory_sessions_owner_key unique nulls not distinct (session_id, user_id);
