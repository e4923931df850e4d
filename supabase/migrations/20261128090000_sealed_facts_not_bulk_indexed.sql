-- A sealed fact (key_id set) is never indexed for search, on the row path and in a bulk load alike: the
-- row trigger drops a sealed fact's search row before it checks for a bulk load, and a bulk load's indexing
-- pass skips sealed facts.

create or replace function memory_private.memory_search_docs_sync() returns trigger
    language plpgsql
    set search_path = ''
as $$
declare
    v_speaker text := nullif(lower(extensions.unaccent('extensions.unaccent'::regdictionary,
                                                       new.metadata ->> 'speaker')), '');
begin
    if new.key_id is not null then
        delete from public.memory_search_docs d where d.user_id = new.user_id and d.memory_id = new.id;
        return null;
    end if;
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

create or replace function memory_private.memory_search_index_facts(p_user_id uuid)
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
