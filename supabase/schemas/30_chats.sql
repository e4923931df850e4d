-- Chats: conversations that outlive the process. Each row keeps two histories in pydantic-ai's message JSON
-- (`ModelMessagesTypeAdapter`): `full_history`, everything said (for the UI, never rewritten), and
-- `assistant_history`, what the model is given as `message_history` (its oldest turns replaced by one summary
-- turn once it grows past the compaction window). `summary_text` + `summary_embedding` describe the whole chat
-- and are what `chat_search` ranks.

create table public.chats (
    id                   uuid primary key default gen_random_uuid(),
    user_id              uuid not null,
    title                text,
    -- A title the user chose is never replaced by a generated one.
    title_is_user        boolean not null default false,
    -- The summary's key terms when the title was generated: the title is regenerated only when the summary's
    -- current key terms share too few of them (the focus moved).
    title_terms          text[] not null default '{}',
    full_history         jsonb not null default '[]'::jsonb check (jsonb_typeof(full_history) = 'array'),
    assistant_history    jsonb not null default '[]'::jsonb check (jsonb_typeof(assistant_history) = 'array'),
    summary_text         text not null default '',
    summary_embedding    extensions.halfvec(384),
    summary_model        text,
    -- Turns appended so far (= jsonb_array_length(full_history)); the summary records the count it covers, so
    -- an older summary finishing late never overwrites a newer one.
    turn_count           integer not null default 0,
    summary_turn_count   integer not null default 0,
    -- Bumped by each compaction: a compaction computed from an older epoch is refused (two racing compactions
    -- apply once). Appends never change the compacted prefix, so they need no epoch check.
    compaction_epoch     integer not null default 0,
    last_activity_at     timestamptz not null default now(),
    created_at           timestamptz not null default now(),
    search_tsv           tsvector generated always as
                             (memory_private.memory_tsvector(coalesce(title, '') || ' ' || summary_text)) stored,
    -- The idempotency key of the request that created the chat (`chat_create`) and a hash of that request: a
    -- retried create finds its chat instead of making a second one. Kept as long as the chat is.
    create_key           text check (length(create_key) between 1 and 255),
    create_hash          text check (length(create_hash) between 1 and 128),
    -- A summary always has its embedding (and the model that made it), and the other way round.
    constraint chats_summary_has_embedding check (
        (summary_text = '') = (summary_embedding is null) and (summary_embedding is null) = (summary_model is null)
    )
);

create index chats_user_activity_idx on public.chats (user_id, last_activity_at desc, id);
create index chats_search_tsv_idx on public.chats using gin (search_tsv);
-- One chat per creating key and user (a key names one user's request: another user's same key is another chat).
create unique index chats_create_key_idx on public.chats (user_id, create_key) where create_key is not null;

alter table public.chats enable row level security;

create policy chats_select_own on public.chats
    for select to authenticated using ((select auth.uid()) = user_id);
create policy chats_insert_own on public.chats
    for insert to authenticated with check ((select auth.uid()) = user_id);
create policy chats_update_own on public.chats
    for update to authenticated using ((select auth.uid()) = user_id) with check ((select auth.uid()) = user_id);
create policy chats_delete_own on public.chats
    for delete to authenticated using ((select auth.uid()) = user_id);

revoke all on table public.chats from anon, authenticated;
grant select, insert, update, delete on table public.chats to authenticated;
grant all on table public.chats to service_role;

-- chat_search: the user's chats ranked by a weighted sum of the summary embedding's cosine similarity, the
-- text match of the query's words against title + summary (ts_rank_cd normalised to 0..1), and recency
-- (half-life `p_half_life_days`). Security invoker: RLS keeps every other user's chats out, whatever
-- `p_user_id` says.
create function public.chat_search(
    p_user_id        uuid,
    p_query          text,
    p_embedding      extensions.halfvec(384) default null,
    p_model          text default null,
    p_limit          integer default 5,
    p_w_semantic     real default 0.5,
    p_w_text         real default 0.4,
    p_w_recency      real default 0.1,
    p_half_life_days real default 30,
    p_now            timestamptz default now()
)
returns table (
    id uuid, title text, summary_text text, last_activity_at timestamptz, turn_count integer,
    score real, semantic real, text_match real, recency real
)
language sql
stable
set search_path = ''
as $$
    with q as (
        -- Any of the query's words may match (OR): "volvamos al chat de los soportes anodizados" must find a
        -- chat about anodised brackets though it never says "volvamos".
        select nullif(array_to_string(array(
                   select quote_literal(lexeme) from unnest(memory_private.memory_tsvector(coalesce(p_query, ''))) as l
               ), ' | '), '') as words
    ), scored as (
        select c.id, c.title, c.summary_text, c.last_activity_at, c.turn_count,
               coalesce(case when p_embedding is not null and c.summary_model = p_model
                             then greatest(0, 1 - (c.summary_embedding operator(extensions.<=>) p_embedding))
                        end, 0)::real as semantic,
               coalesce(case when q.words is not null
                             then ts_rank_cd(c.search_tsv, to_tsquery('memory_private.memory_search'::regconfig, q.words), 32)
                        end, 0)::real as text_match,
               power(0.5, greatest(0, extract(epoch from (p_now - c.last_activity_at))) / 86400.0
                          / greatest(p_half_life_days, 0.001))::real as recency
          from public.chats c cross join q
         where c.user_id = p_user_id
    )
    select s.id, s.title, s.summary_text, s.last_activity_at, s.turn_count,
           (p_w_semantic * s.semantic + p_w_text * s.text_match + p_w_recency * s.recency)::real as score,
           s.semantic, s.text_match, s.recency
      from scored s
     where s.semantic > 0 or s.text_match > 0
     order by score desc, s.last_activity_at desc, s.id
     limit greatest(p_limit, 0);
$$;

revoke all on function public.chat_search(uuid, text, extensions.halfvec, text, integer, real, real, real, real, timestamptz)
    from public, anon;
grant execute on function public.chat_search(uuid, text, extensions.halfvec, text, integer, real, real, real, real, timestamptz)
    to authenticated, service_role;
