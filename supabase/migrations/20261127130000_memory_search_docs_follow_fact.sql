-- memory_search_docs: a search row must name one of the user's facts (a trigger, as the dropped foreign key did).

-- A search row belongs to one of the user's facts: a row naming any other id is refused, as a foreign key
-- would (23503), so a client of the REST API cannot grow the search table past the user's facts (its primary
-- key is (user_id, memory_id), and facts are bounded by `facts_per_user`). A row trigger with a lookup by the
-- facts' primary key, not a foreign key: the foreign key's cached check plans, made on an empty table, read
-- every search row of the user per fact (`bench/write_scaling.py`).
create function memory_private.memory_search_docs_follow_fact() returns trigger
    language plpgsql
    set search_path = ''
as $$
begin
    -- Another user's row, written as `authenticated`: row-level security refuses it with its own error.
    if coalesce(current_setting('role', true), '') = 'authenticated' and new.user_id is distinct from auth.uid() then
        return new;
    end if;
    if not exists (select 1 from public.user_memory m
                    where m.id = new.memory_id and m.user_id = new.user_id and m.kind = 'fact') then
        raise exception 'a search row must name one of the user''s facts'
            using errcode = '23503', detail = 'memory_search_docs.memory_id';
    end if;
    return new;
end;
$$;

create trigger memory_search_docs_follow_fact
    before insert or update of memory_id, user_id on public.memory_search_docs
    for each row execute function memory_private.memory_search_docs_follow_fact();

revoke all on function memory_private.memory_search_docs_follow_fact() from public, anon;
grant execute on function memory_private.memory_search_docs_follow_fact() to authenticated, service_role;
