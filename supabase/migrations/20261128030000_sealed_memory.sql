-- Sealed (encrypted) facts: user_memory.key_id names the key a row's content is sealed with (read from the
-- content, 'sealed:v1:<key id>:<base64>', so the write functions are unchanged), and the search-row trigger
-- gives a sealed fact no search row (its text, tsvector, postings and vector would be the plain text's).

alter table public.user_memory
    add column key_id text generated always as
        (case when content like 'sealed:v1:%' then split_part(content, ':', 3) end) stored;

comment on column public.user_memory.key_id is
    'Id of the key a sealed (encrypted) row is sealed with, read from its content; null: plain text. Sealed rows have no search row, vector or near-duplicate keys.';

-- `memory-plugin rotate-key` finds the rows sealed under keys other than the active one (few, or none).
create index user_memory_key_id_idx on public.user_memory (key_id, id) where key_id is not null;

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
