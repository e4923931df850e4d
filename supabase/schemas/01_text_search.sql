-- Text helpers of search: the text-search configuration and two immutable functions used by generated
-- columns of memory_search_docs and by memory_search.

-- English stemming with English *and* Spanish stop words dropped (the plugin's users write both). On LoCoMo
-- (English) English stems beat `simple` by +0.09 BM25 recall@10; adding the `spanish` configuration as well
-- cost -0.02 recall@10 of the fused ranking (it keeps "what", "did" as lexemes that match every turn).
-- Spanish words pass through the English stemmer unchanged or lightly trimmed, identically in facts and
-- questions.
create text search dictionary memory_private.memory_spanish_stopwords (
    template = pg_catalog.simple, stopwords = spanish, accept = false
);
create text search configuration memory_private.memory_search (copy = pg_catalog.english);
alter text search configuration memory_private.memory_search
    alter mapping for asciiword, asciihword, hword_asciipart, word, hword, hword_part
    with memory_private.memory_spanish_stopwords, pg_catalog.english_stem;

-- The text-search form of a fact (and of a question, whose lexemes are looked up). `unaccent` is only
-- `stable` (its dictionary could change), so it is called with the dictionary named and the wrapper declared
-- immutable, as Supabase users do, to be usable in a generated column.
create function memory_private.memory_tsvector(p_text text) returns tsvector
    language sql
    immutable
    strict
    parallel safe
    set search_path = ''
as $$
    select to_tsvector('memory_private.memory_search'::regconfig,
                       extensions.unaccent('extensions.unaccent'::regdictionary, p_text));
$$;

-- Whether a text holds a time expression ("yesterday", "last week", "el sábado", a year): computed once per
-- fact at write time (a generated column), so "when" questions pay nothing per candidate for it.
create function memory_private.memory_has_time_expression(p_text text) returns boolean
    language sql
    immutable
    strict
    parallel safe
    set search_path = ''
as $$
    select lower(extensions.unaccent('extensions.unaccent'::regdictionary, p_text)) ~ (
        '\m(yesterday|today|tonight|tomorrow|last|next|ago|weekend|recently|lately|soon|'
        || '(mon|tues|wednes|thurs|fri|satur|sun)day|week|month|year|january|february|march|april|may|june|july|'
        || 'august|september|october|november|december|ayer|hoy|manana|semana|mes|ano|pasado|proximo|hace|lunes|'
        || 'martes|miercoles|jueves|viernes|sabado|domingo|[12][0-9]{3})s?\M');
$$;

revoke all on function memory_private.memory_tsvector(text) from public, anon;
revoke all on function memory_private.memory_has_time_expression(text) from public, anon;
grant execute on function memory_private.memory_tsvector(text) to authenticated, service_role;
grant execute on function memory_private.memory_has_time_expression(text) to authenticated, service_role;
