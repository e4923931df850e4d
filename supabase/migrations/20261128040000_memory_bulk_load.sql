-- Bulk loads (an import) index their facts for search in a few set-based statements, not one trigger chain
-- per fact, whose per-fact update of the user's counter row made a 50,000-fact import take 1,449 s
-- (supabase/schemas/45_memory_bulk_load.sql). The three search-index triggers leave a bulk load's new rows to
-- memory_private.memory_search_index_facts.

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
         where m.user_id = p_user_id and m.kind = 'fact'
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

create or replace function memory_private.memory_search_docs_sync() returns trigger
    language plpgsql
    set search_path = ''
as $$
declare
    v_speaker text := nullif(lower(extensions.unaccent('extensions.unaccent'::regdictionary,
                                                       new.metadata ->> 'speaker')), '');
begin
    -- A bulk load (an import, service path only) indexes its facts afterwards, in one statement
    -- (memory_private.memory_search_index_facts, 45_memory_bulk_load.sql).
    if tg_op = 'INSERT' and memory_private.memory_bulk_load() then
        return null;
    end if;
    if tg_op = 'UPDATE' then
        if new.content is not distinct from old.content
           and new.session_id is not distinct from old.session_id
           and new.metadata ->> 'speaker' is not distinct from old.metadata ->> 'speaker' then
            return null;
        end if;
        update public.memory_search_docs d
           set session_id      = new.session_id,
               speaker         = v_speaker,
               content         = new.content,
               embedding       = case when d.content = new.content then d.embedding end,
               embedding_model = case when d.content = new.content then d.embedding_model end,
               embedded_at     = case when d.content = new.content then d.embedded_at end
         where d.user_id = new.user_id and d.memory_id = new.id;
        if found then
            return null;
        end if;
    end if;
    insert into public.memory_search_docs (memory_id, user_id, session_id, content, speaker, prev_memory_id)
    values (new.id, new.user_id, new.session_id, new.content, v_speaker,
            case when new.session_id is not null then
                (select p.memory_id from public.memory_search_docs p
                  where p.user_id = new.user_id and p.session_id = new.session_id and p.memory_id <> new.id
                  order by p.seq desc limit 1) end);
    return null;
end;
$$;

create or replace function memory_private.memory_search_counts_add() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    -- A bulk load numbers its rows itself and counts them once (memory_private.memory_search_index_facts).
    if memory_private.memory_bulk_load() then
        return new;
    end if;
    -- The trigger fires on the partition: tg_relid is the partition the row lands in.
    insert into memory_private.memory_search_counts as c (user_id, docs, last_seq, search_partition)
    values (new.user_id, 1, 1, tg_relid::regclass)
    on conflict (user_id) do update
        set docs = c.docs + 1, last_seq = c.last_seq + 1, search_partition = excluded.search_partition
    returning c.last_seq into new.seq;
    return new;
end;
$$;

create or replace function memory_private.memory_search_terms_sync() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    if tg_op = 'DELETE' then
        delete from memory_private.memory_search_terms t where t.user_id = old.user_id and t.memory_id = old.memory_id;
        return null;
    end if;
    if tg_op = 'INSERT' and memory_private.memory_bulk_load() then
        return null;  -- a bulk load writes the postings of all its rows in one statement
    end if;
    if tg_op = 'UPDATE' then
        if new.search_tsv = old.search_tsv then
            return null;
        end if;
        delete from memory_private.memory_search_terms t where t.user_id = new.user_id and t.memory_id = new.memory_id;
    end if;
    insert into memory_private.memory_search_terms (user_id, lexeme, memory_id, tf)
    select new.user_id, u.lexeme, new.memory_id, least(cardinality(u.positions), 32767)
      from unnest(new.search_tsv) as u;
    return null;
end;
$$;
