-- memory_search_terms: no foreign key to memory_search_docs. Its check ran once per posting (~8 a fact) as a plan
-- cached per connection; planned while the tables were empty, that plan read all of the user's search rows for
-- each posting, so a write's cost grew with the user's memory. The postings are written and deleted by
-- memory_search_terms_sync only, which now also follows a deleted search row.
--
-- memory_search_docs: no foreign key to user_memory, for the same reason (its check, once per fact, read the
-- user's facts: a 200-fact write passed the 5 s statement_timeout at ~5,000 facts); a deleted fact's search
-- row is deleted by a trigger instead.

alter table memory_private.memory_search_terms drop constraint memory_search_terms_doc_fkey;

-- A fact's postings follow its text, and go with its search row.
create or replace function memory_private.memory_search_terms_sync() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    if tg_op = 'DELETE' then
        delete from memory_private.memory_search_terms t where t.user_id = old.user_id and t.memory_id = old.memory_id;
        return null;
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

drop trigger memory_search_docs_terms_sync on public.memory_search_docs;
create trigger memory_search_docs_terms_sync
    after insert or update of content or delete on public.memory_search_docs
    for each row execute function memory_private.memory_search_terms_sync();


alter table public.memory_search_docs drop constraint memory_search_docs_memory_id_fkey;
-- Search rows of facts deleted before this migration (none: the foreign key cascaded) need no cleanup.

-- A deleted fact takes its search row (and through it its postings and count) with it.
create function memory_private.memory_search_docs_drop() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    delete from public.memory_search_docs d where d.user_id = old.user_id and d.memory_id = old.id;
    return null;
end;
$$;

create trigger user_memory_search_docs_drop
    after delete on public.user_memory
    for each row
    execute function memory_private.memory_search_docs_drop();

revoke all on function memory_private.memory_search_docs_drop() from public, anon;
grant execute on function memory_private.memory_search_docs_drop() to authenticated, service_role;
