-- The Postgres session store runs as memory_worker (supabase/schemas/91_service_roles.sql).

-- The plugin's shared machinery runs as `memory_worker` (40_memory_jobs.sql), never as a superuser: the job
-- queue switches to it for each queue statement, and the Postgres session store connects with it as its role
-- (`options=-c role=memory_worker` on the application role's URL; memory_plugin_app holds memory_worker). The
-- session store enforces the owner rules itself (32_memory_sessions.sql), so the worker sees every session.
create policy memory_sessions_worker_all on memory_private.memory_sessions
    for all to memory_worker using (true) with check (true);
grant select, insert, update, delete on table memory_private.memory_sessions to memory_worker;
