"""The settings grouped by concern keep every `MEMORY_*` variable: each one sets its group's field, the flat names
(constructor arguments, reads, `model_copy` updates) equal the nested ones, and errors still name the variable."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel, SecretStr, ValidationError

from memory_plugin.errors import ConfigurationError
from memory_plugin.settings import MemorySettings, SearchSettings, SessionSettings
from memory_plugin.settings.flat import Flat

VARIABLES: list[tuple[str, str]] = [
    ("MEMORY_DATABASE_URL", "database.url"),
    ("MEMORY_DATA_DIR", "database.data_dir"),
    ("MEMORY_EMBEDDED_SHARED_BUFFERS_MB", "database.embedded_shared_buffers_mb"),
    ("MEMORY_AUTO_MIGRATE", "database.auto_migrate"),
    ("MEMORY_ADMIN_DATABASE_URL", "database.admin_url"),
    ("MEMORY_POOL_MIN_SIZE", "database.pool_min_size"),
    ("MEMORY_POOL_MAX_SIZE", "database.pool_max_size"),
    ("MEMORY_CONNECT_TIMEOUT_SECONDS", "database.connect_timeout_seconds"),
    ("MEMORY_DATABASE_POOLER", "database.pooler"),
    ("MEMORY_SUPABASE_URL", "supabase.url"),
    ("MEMORY_SUPABASE_ANON_KEY", "supabase.anon_key"),
    ("MEMORY_SUPABASE_TIMEOUT_SECONDS", "supabase.timeout_seconds"),
    ("MEMORY_MAX_MESSAGES_PER_SESSION", "sessions.max_messages"),
    ("MEMORY_SESSION_TTL_SECONDS", "sessions.ttl_seconds"),
    ("MEMORY_MAX_SESSIONS", "sessions.max_sessions"),
    ("MEMORY_MAX_MESSAGE_CHARS", "sessions.max_message_chars"),
    ("MEMORY_SESSION_STORE_MAX_BYTES", "sessions.store_max_bytes"),
    ("MEMORY_MAX_SESSIONS_PER_USER", "sessions.max_per_user"),
    ("MEMORY_SESSION_MAX_BYTES_PER_USER", "sessions.max_bytes_per_user"),
    ("MEMORY_MAX_SESSION_ENTITY_VALUES_PER_KIND", "sessions.max_entity_values_per_kind"),
    ("MEMORY_MAX_SESSION_ENTITY_VALUES", "sessions.max_entity_values"),
    ("MEMORY_MAX_SESSION_INTENTS", "sessions.max_intents"),
    ("MEMORY_SESSION_SWEEP_INTERVAL_SECONDS", "sessions.sweep_interval_seconds"),
    ("MEMORY_SESSION_BACKEND", "sessions.backend"),
    ("MEMORY_REDIS_URL", "sessions.redis_url"),
    ("MEMORY_MAX_CHECKPOINTS", "sessions.max_checkpoints"),
    ("MEMORY_MAX_FACT_CHARS", "writes.max_fact_chars"),
    ("MEMORY_MAX_NOTE_CHARS", "writes.max_note_chars"),
    ("MEMORY_HEALTH_NOTES", "writes.health_notes"),
    ("MEMORY_WRITE_RATE_PER_SECOND", "writes.rate_per_second"),
    ("MEMORY_MAX_FACTS_PER_USER", "writes.max_facts_per_user"),
    ("MEMORY_WRITE_BURST", "writes.burst"),
    ("MEMORY_MIN_FACT_CONFIDENCE", "writes.min_fact_confidence"),
    ("MEMORY_REINFORCEMENT_STEP", "writes.reinforcement_step"),
    ("MEMORY_MAX_MEMORY_BLOCK_CHARS", "context.max_block_chars"),
    ("MEMORY_MAX_FACTS_IN_CONTEXT", "context.max_facts"),
    ("MEMORY_MAX_PROJECTS_IN_CONTEXT", "context.max_projects"),
    ("MEMORY_MAX_PATTERNS_IN_CONTEXT", "context.max_patterns"),
    ("MEMORY_MAX_REJECTIONS_IN_CONTEXT", "context.max_rejections"),
    ("MEMORY_WEIGHT_IMPORTANCE", "context.weight_importance"),
    ("MEMORY_WEIGHT_CONFIDENCE", "context.weight_confidence"),
    ("MEMORY_WEIGHT_RECENCY", "context.weight_recency"),
    ("MEMORY_RECENCY_WINDOW_DAYS", "context.recency_window_days"),
    ("MEMORY_RECENT_MESSAGES_IN_PROMPT", "context.recent_messages_in_prompt"),
    ("MEMORY_MESSAGE_CHARS_IN_PROMPT", "context.message_chars_in_prompt"),
    ("MEMORY_CONTEXT_BUDGET_TOKENS", "context.budget_tokens"),
    ("MEMORY_CONTEXT_SLOTS_TOKENS", "context.slots_tokens"),
    ("MEMORY_CONTEXT_SUMMARY_TOKENS", "context.summary_tokens"),
    ("MEMORY_CONTEXT_SUMMARY_PRESSURE_TOKENS", "context.summary_pressure_tokens"),
    ("MEMORY_CONTEXT_MIN_RECENT_MESSAGES", "context.min_recent_messages"),
    ("MEMORY_TOKEN_MODEL", "context.token_model"),
    ("MEMORY_SUMMARY_MODEL", "summary.model"),
    ("MEMORY_SUMMARY_MIN_NEW_CHARS", "summary.min_new_chars"),
    ("MEMORY_SUMMARY_EVERY_N_MESSAGES", "summary.every_n_messages"),
    ("MEMORY_SUMMARY_ON_TOPIC_CHANGE", "summary.on_topic_change"),
    ("MEMORY_SUMMARY_ON_DECISION", "summary.on_decision"),
    ("MEMORY_SUMMARY_WITH_EXTRACTION", "summary.with_extraction"),
    ("MEMORY_SUMMARY_RESYNC_DAYS", "summary.resync_days"),
    ("MEMORY_CHAT_SUMMARY_MODEL", "summary.chat_model"),
    ("MEMORY_NEAR_DUPLICATE_THRESHOLD", "quality.near_duplicate_threshold"),
    ("MEMORY_DEDUP_EMBEDDING_THRESHOLD", "quality.dedup_embedding_threshold"),
    ("MEMORY_HALF_LIFE_DAYS", "quality.half_life_days"),
    ("MEMORY_DECAY_FLOOR", "quality.decay_floor"),
    ("MEMORY_VOCABULARY_MODULE", "quality.vocabulary_module"),
    ("MEMORY_RETENTION_RAW_MONTHS", "retention.raw_months"),
    ("MEMORY_RETENTION_DEAD_JOB_DAYS", "retention.dead_job_days"),
    ("MEMORY_RETENTION_MAX_DEAD_JOBS", "retention.max_dead_jobs"),
    ("MEMORY_RETENTION_CHECKPOINT_DAYS", "retention.checkpoint_days"),
    ("MEMORY_RETENTION_RECEIPT_DAYS", "retention.receipt_days"),
    ("MEMORY_RETENTION_APPLIED_WRITE_DAYS", "retention.applied_write_days"),
    ("MEMORY_EMBEDDING_MODEL", "embeddings.model"),
    ("MEMORY_EMBEDDING_BATCH_SIZE", "embeddings.batch_size"),
    ("MEMORY_LOCAL_EMBEDDING_RUNTIME", "embeddings.local_runtime"),
    ("MEMORY_SEARCH_WEIGHT_TEXT", "search.weight_text"),
    ("MEMORY_SEARCH_WEIGHT_VECTOR", "search.weight_vector"),
    ("MEMORY_SEARCH_WEIGHT_NEIGHBOUR", "search.weight_neighbour"),
    ("MEMORY_SEARCH_WEIGHT_TRIGRAM", "search.weight_trigram"),
    ("MEMORY_SEARCH_WEIGHT_SPEAKER", "search.weight_speaker"),
    ("MEMORY_SEARCH_WEIGHT_DATE", "search.weight_date"),
    ("MEMORY_SEARCH_WEIGHT_TIME", "search.weight_time"),
    ("MEMORY_SEARCH_WEIGHT_IMPORTANCE", "search.weight_importance"),
    ("MEMORY_SEARCH_WEIGHT_CONFIDENCE", "search.weight_confidence"),
    ("MEMORY_SEARCH_WEIGHT_RECENCY", "search.weight_recency"),
    ("MEMORY_SEARCH_DATE_SLACK_DAYS", "search.date_slack_days"),
    ("MEMORY_SEARCH_CANDIDATES", "search.candidates"),
    ("MEMORY_SEARCH_RERANK_CANDIDATES", "search.rerank_candidates"),
    ("MEMORY_SEARCH_EXACT_SCAN_BELOW", "search.exact_scan_below"),
    ("MEMORY_SEARCH_TEXT_SCAN_LIMIT", "search.text_scan_limit"),
    ("MEMORY_MAX_SEARCH_CHARS", "search.max_chars"),
    ("MEMORY_SEARCH_REWRITE_MODEL", "search.rewrite_model"),
    ("MEMORY_EXTRACTION_MODEL", "extraction.model"),
    ("MEMORY_AGENT_MODEL", "extraction.agent_model"),
    ("MEMORY_EXTRACT_EVERY_N_MESSAGES", "extraction.every_n_messages"),
    ("MEMORY_EXTRACT_ON_EXPLICIT_TRIGGERS", "extraction.on_explicit_triggers"),
    ("MEMORY_EXTRACT_AT_END_OF_REQUEST", "extraction.at_end_of_request"),
    ("MEMORY_EXTRACTION_CANDIDATE_FACTS", "extraction.candidate_facts"),
    ("MEMORY_DATE_TIMEZONE", "extraction.date_timezone"),
    ("MEMORY_EXTRACTION_EXTRA_TRIGGERS", "extraction.extra_triggers"),
    ("MEMORY_BACKGROUND_EXTRACTION", "background.extraction"),
    ("MEMORY_BACKGROUND_WORKER", "background.worker"),
    ("MEMORY_BACKGROUND_CONCURRENCY", "background.concurrency"),
    ("MEMORY_BACKGROUND_MAX_PENDING_JOBS", "background.max_pending_jobs"),
    ("MEMORY_BACKGROUND_MAX_PENDING_JOBS_PER_USER", "background.max_pending_jobs_per_user"),
    ("MEMORY_BACKGROUND_LEASE_SECONDS", "background.lease_seconds"),
    ("MEMORY_BACKGROUND_MAX_ATTEMPTS", "background.max_attempts"),
    ("MEMORY_BACKGROUND_RETRY_BASE_SECONDS", "background.retry_base_seconds"),
    ("MEMORY_BACKGROUND_RETRY_MAX_SECONDS", "background.retry_max_seconds"),
    ("MEMORY_BACKGROUND_POLL_SECONDS", "background.poll_seconds"),
    ("MEMORY_BACKGROUND_CLOSE_TIMEOUT_SECONDS", "background.close_timeout_seconds"),
    ("MEMORY_RESILIENT_STORE", "outage.resilient_store"),
    ("MEMORY_REQUIRE_PG_MEMORY", "outage.require_pg_memory"),
    ("MEMORY_FALLBACK_CACHE_USERS", "outage.fallback_cache_users"),
    ("MEMORY_RETRY_BASE_SECONDS", "outage.retry_base_seconds"),
    ("MEMORY_RETRY_MAX_SECONDS", "outage.retry_max_seconds"),
    ("MEMORY_OUTAGE_LOG_INTERVAL_SECONDS", "outage.log_interval_seconds"),
    ("MEMORY_JWT_SECRET", "api.jwt_secret"),
    ("MEMORY_JWT_JWKS_URL", "api.jwt_jwks_url"),
    ("MEMORY_JWT_AUDIENCE", "api.jwt_audience"),
    ("MEMORY_API_MAX_BODY_BYTES", "api.max_body_bytes"),
    ("MEMORY_API_RATE_PER_SECOND", "api.rate_per_second"),
    ("MEMORY_API_RATE_BURST", "api.rate_burst"),
    ("MEMORY_API_CORS_ORIGINS", "api.cors_origins"),
    ("MEMORY_API_DEV_TOKENS", "api.dev_tokens"),
    ("MEMORY_ENCRYPTION_KEYS", "encryption.keys"),
    ("MEMORY_ENCRYPTION_ACTIVE_KEY", "encryption.active_key"),
    ("MEMORY_ENCRYPTION_HASH_KEY", "encryption.hash_key"),
    ("MEMORY_SENSITIVE_CATEGORIES", "encryption.sensitive_categories"),
]
"""Every environment variable and the group field it sets (`settings.<group>.<field>`)."""

KEYS = "k1:" + base64.b64encode(bytes(range(32))).decode()
HASH_KEY = base64.b64encode(bytes(range(16))).decode()
SAMPLES: dict[str, tuple[str, Any]] = {
    "database.url": ("postgresql://u:p@db:5432/app", "postgresql://u:p@db:5432/app"),
    "database.data_dir": ("/srv/memory", Path("/srv/memory")),
    "database.embedded_shared_buffers_mb": ("64", 64),
    "database.admin_url": ("postgresql://admin@db/app", "postgresql://admin@db/app"),
    "database.pooler": ("session", "session"),
    "supabase.url": ("https://abcd.supabase.co", "https://abcd.supabase.co"),
    "supabase.anon_key": ("anon", "anon"),
    "sessions.backend": ("postgres", "postgres"),
    "sessions.redis_url": ("redis://cache:6379/0", "redis://cache:6379/0"),
    "writes.health_notes": ("keep_notes", "keep_notes"),
    "context.token_model": ("openai:gpt-4o", "openai:gpt-4o"),
    "summary.model": ("test", "test"),
    "summary.chat_model": ("test", "test"),
    "quality.half_life_days": ('{"preference": 90}', "preference: 90"),
    "quality.vocabulary_module": ("agents.vocabulary:SHOP_VOCABULARY", "agents.vocabulary:SHOP_VOCABULARY"),
    "embeddings.model": ("none", "none"),
    "embeddings.local_runtime": ("torch", "torch"),
    "search.rewrite_model": ("test", "test"),
    "extraction.model": ("test", "test"),
    "extraction.agent_model": ("test", "test"),
    "extraction.date_timezone": ("Europe/Madrid", "Europe/Madrid"),
    "extraction.extra_triggers": ('["anota que"]', ["anota que"]),
    "api.jwt_secret": ("s3cret", "s3cret"),
    "api.jwt_jwks_url": ("https://abcd.supabase.co/jwks", "https://abcd.supabase.co/jwks"),
    "api.jwt_audience": ("service", "service"),
    "api.cors_origins": ("*", "*"),
    "encryption.keys": (KEYS, KEYS),
    "encryption.active_key": ("k1", "k1"),
    "encryption.hash_key": (HASH_KEY, HASH_KEY),
    "encryption.sensitive_categories": ('["health_note"]', ("health_note",)),
}
"""Values unlike the default for the fields a rule by type cannot make up (as text, and as read back)."""

COMPANIONS: dict[str, dict[str, str]] = {
    "encryption.keys": {"MEMORY_ENCRYPTION_HASH_KEY": HASH_KEY},
    "encryption.active_key": {"MEMORY_ENCRYPTION_KEYS": KEYS, "MEMORY_ENCRYPTION_HASH_KEY": HASH_KEY},
    "encryption.hash_key": {"MEMORY_ENCRYPTION_KEYS": KEYS},
}
"""Variables a value needs beside it (a key ring is checked whole)."""

NAMES = MemorySettings.flat_names()
BY_VARIABLE = {f"MEMORY_{name.upper()}": name for name in NAMES}


def plain(value: Any) -> Any:
    """A value as comparable text: a secret's value, a half-life table's changed entry."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, dict):
        return "preference: 90" if value.get("preference") == 90 else value
    return value


def sample(path: str, default: Any) -> tuple[str, Any]:
    """A valid value unlike `default`, as the variable's text and as the setting holds it."""
    if path in SAMPLES:
        return SAMPLES[path]
    if isinstance(default, bool):
        return str(not default).lower(), not default
    if isinstance(default, int):
        return str(default + 1), default + 1
    if isinstance(default, float):
        value = default / 2 if default else 0.5
        return str(value), value
    raise AssertionError(f"no sample value for {path} (default {default!r}): add one to SAMPLES")


def nested(settings: MemorySettings, path: str) -> Any:
    group, field = path.split(".")
    return getattr(getattr(settings, group), field)


@pytest.fixture(autouse=True)
def no_memory_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for flat in NAMES.values():
        for variable in flat.variables:
            monkeypatch.delenv(variable, raising=False)


def test_the_table_holds_every_variable_and_only_code_sets_the_vocabulary() -> None:
    declared = [(variable, flat.path) for flat in NAMES.values() for variable in flat.variables[:1]]
    assert declared == VARIABLES
    assert len(NAMES) == 128
    assert NAMES["vocabulary"].variables == ()
    assert NAMES["require_pg_memory"].variables == ("MEMORY_REQUIRE_PG_MEMORY", "REQUIRE_PG_MEMORY")


@pytest.mark.parametrize(("variable", "path"), VARIABLES)
def test_each_variable_sets_its_group_field_and_nothing_else(
    variable: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = MemorySettings()
    raw, expected = sample(path, plain(nested(default, path)))
    for name, value in {variable: raw, **COMPANIONS.get(path, {})}.items():
        monkeypatch.setenv(name, value)

    settings = MemorySettings()

    assert plain(nested(settings, path)) == expected != plain(nested(default, path))
    assert plain(getattr(settings, BY_VARIABLE[variable])) == expected  # the flat read
    changed = {
        name for name, flat in NAMES.items() if plain(nested(settings, flat.path)) != plain(nested(default, flat.path))
    }
    assert changed == {BY_VARIABLE[v] for v in (variable, *COMPANIONS.get(path, {}))}


@pytest.mark.parametrize(("variable", "path"), VARIABLES)
def test_a_flat_argument_read_and_copy_are_the_nested_ones(variable: str, path: str) -> None:
    raw, _ = sample(path, plain(nested(MemorySettings(), path)))
    texts = {BY_VARIABLE[v]: value for v, value in {variable: raw, **COMPANIONS.get(path, {})}.items()}
    given = {name: json.loads(text) if text[:1] in "[{" else text for name, text in texts.items()}  # not JSON here
    groups: dict[str, dict[str, Any]] = {}
    for name, value in given.items():
        groups.setdefault(NAMES[name].group, {})[NAMES[name].field] = value

    flat, grouped = MemorySettings(**given), MemorySettings(**groups)

    assert flat == grouped
    assert getattr(flat, BY_VARIABLE[variable]) == nested(grouped, path)
    copied = MemorySettings().model_copy(update={name: nested(flat, NAMES[name].path) for name in given})
    assert copied == flat
    assert MemorySettings().replace(**given) == flat


def test_every_flat_read_is_typed_as_its_group_field() -> None:
    # The flat reads are what mypy sees (`settings.search_candidates: int`): their declared type is the field's.
    for name, flat in NAMES.items():
        group = MemorySettings.model_fields[flat.group].annotation
        assert isinstance(group, type)
        assert issubclass(group, BaseModel)
        declared = get_args(flat.__orig_class__)[0]  # type: ignore[attr-defined]
        assert declared == group.model_fields[flat.field].annotation, name
        assert isinstance(getattr(MemorySettings, name), Flat)


def test_arguments_win_over_the_environment_and_a_group_given_whole_reads_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMORY_SEARCH_CANDIDATES", "42")
    monkeypatch.setenv("MEMORY_SEARCH_WEIGHT_TEXT", "2")

    assert (MemorySettings().search.candidates, MemorySettings().search.weight_text) == (42, 2.0)
    by_flat_name = MemorySettings(search_candidates=5)
    assert (by_flat_name.search.candidates, by_flat_name.search.weight_text) == (5, 2.0)
    by_group_fields = MemorySettings(search={"candidates": 5})
    assert (by_group_fields.search.candidates, by_group_fields.search.weight_text) == (5, 2.0)
    whole = MemorySettings(search=SearchSettings(candidates=5))
    assert (whole.search.candidates, whole.search.weight_text) == (5, 1.0)
    on_top = MemorySettings(search=SearchSettings(candidates=5), search_weight_text=3)
    assert (on_top.search.candidates, on_top.search.weight_text) == (5, 3.0)
    assert MemorySettings.model_validate({"search_candidates": 6}).search.candidates == 6


def test_plain_require_pg_memory_is_read_and_the_memory_variable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REQUIRE_PG_MEMORY", "true")
    assert MemorySettings().outage.require_pg_memory is True
    monkeypatch.setenv("MEMORY_REQUIRE_PG_MEMORY", "false")
    assert MemorySettings().require_pg_memory is False


def test_model_copy_takes_flat_names_and_group_fields_and_leaves_the_original() -> None:
    settings = MemorySettings()

    copied = settings.model_copy(update={"search_candidates": 7, "sessions": {"ttl_seconds": 5.0}})

    assert (copied.search.candidates, copied.search_candidates, copied.sessions.ttl_seconds) == (7, 7, 5.0)
    assert copied.search.weight_text == settings.search.weight_text
    assert copied.sessions.max_messages == settings.sessions.max_messages
    assert (settings.search.candidates, settings.sessions.ttl_seconds) == (150, 3600.0)
    assert copied.database is settings.database  # untouched groups are shared: they are frozen
    assert settings.model_copy(update={"search_candidates": 0}).search_candidates == 0  # pydantic's: not validated
    whole = settings.model_copy(update={"sessions": SessionSettings(max_messages=3), "session_ttl_seconds": 9.0})
    assert (whole.sessions.max_messages, whole.sessions.ttl_seconds) == (3, 9.0)


def test_replace_checks_the_values_and_keeps_the_environment_it_was_read_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = MemorySettings()
    monkeypatch.setenv("MEMORY_SEARCH_CANDIDATES", "42")

    replaced = settings.replace(pool_max_size=3, sessions={"ttl_seconds": 5.0})

    assert (replaced.database.pool_max_size, replaced.sessions.ttl_seconds) == (3, 5.0)
    assert replaced.search.candidates == 150  # not read again
    assert replaced.replace() == replaced
    with pytest.raises(ConfigurationError, match="MEMORY_SEARCH_CANDIDATES"):
        settings.replace(search_candidates=0)


@pytest.mark.parametrize("how", ["environment", "flat name", "group"])
def test_an_error_names_the_variable_however_the_value_came(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    values: dict[str, Any] = {"flat name": {"search_candidates": 0}, "group": {"search": {"candidates": 0}}}.get(
        how, {}
    )
    if how == "environment":
        monkeypatch.setenv("MEMORY_SEARCH_CANDIDATES", "0")

    with pytest.raises(ConfigurationError, match=r"\(MEMORY_SEARCH_CANDIDATES\)") as info:
        MemorySettings(**values)

    assert info.value.errors()[0]["loc"] == ("search_candidates",)
    assert "greater than or equal to 1" in str(info.value)


def test_a_secret_is_never_echoed_and_a_check_across_a_group_has_no_place() -> None:
    with pytest.raises(ConfigurationError) as empty:
        MemorySettings(database_url="  ")
    assert empty.value.errors()[0]["loc"] == ("database_url",)
    assert empty.value.errors()[0]["input"] == "(hidden)"

    with pytest.raises(ConfigurationError) as across:
        MemorySettings(max_fact_chars=3_000, max_note_chars=2_000)
    assert across.value.errors()[0]["loc"] == ()
    assert "raise MEMORY_MAX_NOTE_CHARS or lower MEMORY_MAX_FACT_CHARS" in str(across.value)


def test_settings_and_their_groups_are_frozen() -> None:
    settings = MemorySettings()
    with pytest.raises(ValidationError):
        settings.search.candidates = 3  # type: ignore[misc]
    with pytest.raises(ValidationError):
        settings.search = SearchSettings()  # type: ignore[misc]
    with pytest.raises((ValidationError, AttributeError)):
        settings.search_candidates = 3  # type: ignore[misc]


def test_the_configuration_reference_names_every_group() -> None:
    reference = (Path(__file__).resolve().parent.parent / "docs" / "configuration.md").read_text(encoding="utf-8")
    missing = [f"settings.{group}" for group in MemorySettings.model_fields if f"`settings.{group}`" not in reference]
    assert not missing, f"docs/configuration.md does not name the groups {missing}"


def test_the_vocabulary_is_code_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from agents.vocabulary import SHOP_VOCABULARY

    monkeypatch.setenv("MEMORY_VOCABULARY", "anything")  # not a variable: ignored (it used to fail the settings)
    settings = MemorySettings(vocabulary=SHOP_VOCABULARY)

    assert settings.quality.vocabulary is SHOP_VOCABULARY
    assert settings.vocabulary is SHOP_VOCABULARY
    assert MemorySettings().model_copy(update={"vocabulary": SHOP_VOCABULARY}).quality.vocabulary is SHOP_VOCABULARY
    with pytest.raises(ConfigurationError, match="Vocabulary"):
        MemorySettings(vocabulary="shop")
