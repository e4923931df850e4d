-- Bulk loads: restoring many facts of one user at once (an import of a user's export) indexes them for search in
-- a few set-based statements instead of one trigger chain per fact.
--
-- Why: a fact's search row is written by row triggers (12_, 13_, 14_), one upsert of the user's counter row
-- (memory_search_counts) per fact. In one transaction every update of that row leaves a version the next one
-- walks past, so an import of n facts cost O(n²): 2.7 s for 5,000 facts, 145 s for 20,000, 1,449 s for 50,000.
-- During a bulk load (`set local memory_plugin.bulk_load = 'on'`, honoured on the service path only: never for
-- statements run as `authenticated`) those triggers leave new facts unindexed, and
-- memory_search_index_facts(user) then writes their search rows, postings and count once.

-- Whether the running transaction is a bulk load: the setting is on and the statement is not a user's
-- (`authenticated`, PostgREST's and the plugin's user statements), whose writes are always indexed one by one.
create function memory_private.memory_bulk_load()
    returns boolean
    language sql
    stable
    set search_path = ''
as $$
    select coalesce(current_setting('memory_plugin.bulk_load', true), '') = 'on'
       and coalesce(current_setting('role', true), '') <> 'authenticated';
$$;

-- Index every fact of p_user_id that has no search row yet, as the row triggers would have one by one: in the
-- order they were learned (created_at, id), numbered after the user's last seq, each linked to the previous
-- fact of its session; then their postings and the user's count. Returns the rows indexed. Vectors are not
-- computed here (`memory-plugin reembed`, or `MemoryManager.import_user`, which does it).
create function memory_private.memory_search_index_facts(p_user_id uuid)
    returns bigint
    language plpgsql
    set search_path = ''
as $$
declare
    v_last  bigint;
    v_added bigint;
begin
    if not memory_private.memory_bulk_load() then
        raise exception 'memory_search_index_facts runs in a bulk load on the service path'
            using errcode = '42501', hint = 'set local memory_plugin.bulk_load = ''on'' in the loading transaction';
    end if;
    -- The counter row, locked: a concurrent writer of the user numbers its rows after these.
    select c.last_seq into v_last from memory_private.memory_search_counts c where c.user_id = p_user_id for update;
    v_last := coalesce(v_last, 0);
    with todo as (
        select m.id, m.session_id, m.content, m.metadata, row_number() over (order by m.created_at, m.id) as n
          from public.user_memory m
         where m.user_id = p_user_id and m.kind = 'fact' and m.key_id is null
           and not exists (select from public.memory_search_docs d where d.user_id = p_user_id and d.memory_id = m.id)
    )
    insert into public.memory_search_docs (user_id, memory_id, session_id, seq, prev_memory_id, content, speaker)
    select p_user_id, t.id, t.session_id, v_last + t.n,
           case when t.session_id is not null then coalesce(
               lag(t.id) over (partition by t.session_id order by t.n),
               (select p.memory_id from public.memory_search_docs p
                 where p.user_id = p_user_id and p.session_id = t.session_id order by p.seq desc limit 1)) end,
           t.content,
           nullif(lower(extensions.unaccent('extensions.unaccent'::regdictionary, t.metadata ->> 'speaker')), '')
      from todo t
     order by t.n;
    get diagnostics v_added = row_count;
    if v_added = 0 then
        return 0;
    end if;
    insert into memory_private.memory_search_terms (user_id, lexeme, memory_id, tf)
    select d.user_id, u.lexeme, d.memory_id, least(cardinality(u.positions), 32767)
      from public.memory_search_docs d cross join lateral unnest(d.search_tsv) as u
     where d.user_id = p_user_id and d.seq > v_last;
    insert into memory_private.memory_search_counts as c (user_id, docs, last_seq, search_partition)
    select p_user_id, v_added, v_last + v_added, d.tableoid::regclass
      from public.memory_search_docs d where d.user_id = p_user_id limit 1
    on conflict (user_id) do update
        set docs = c.docs + excluded.docs, last_seq = excluded.last_seq, search_partition = excluded.search_partition;
    return v_added;
end;
$$;

revoke all on function memory_private.memory_bulk_load() from public, anon;
grant execute on function memory_private.memory_bulk_load() to authenticated, service_role;
revoke all on function memory_private.memory_search_index_facts(uuid) from public, anon, authenticated;
grant execute on function memory_private.memory_search_index_facts(uuid) to service_role;
