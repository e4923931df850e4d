"""Configuration: every knob of the plugin, read from `MEMORY_*` environment variables."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import platformdirs
from pydantic import (
    AliasChoices,
    Field,
    PlainSerializer,
    PlainValidator,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from .crypto.keys import KEY_EXAMPLE, KeyRing, parse_key_ring
from .errors import ConfigurationError, MemoryPluginError
from .privacy.health_consent import HealthNotesConsent
from .quality.decay import DEFAULT_HALF_LIFE_DAYS as _DEFAULT_HALF_LIFE_DAYS
from .quality.vocabulary import DEFAULT_VOCABULARY, Vocabulary

__all__ = ["LocalRuntime", "MemorySettings"]


LocalRuntime = Literal["auto", "onnx", "torch"]
"""What runs the offline embedding model (`MemorySettings.local_embedding_runtime`)."""


def _a_vocabulary(value: object) -> Vocabulary:
    # Checked as an instance only: a vocabulary holds compiled patterns and rule objects, nothing pydantic
    # could build from text.
    if not isinstance(value, Vocabulary):
        raise ValueError(f"expected a memory_plugin.quality.vocabulary.Vocabulary, got {type(value).__name__}")
    return value


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("memory-plugin", appauthor=False))


class MemorySettings(BaseSettings):
    """Settings for [`MemoryManager`][memory_plugin.MemoryManager].

    Every field can be set from the environment with the `MEMORY_` prefix, for example
    `MEMORY_DATABASE_URL=postgresql://...` or `MEMORY_SESSION_TTL_SECONDS=600`, or passed directly:
    `MemorySettings(database_url=..., max_facts_in_context=8)`.
    """

    model_config = SettingsConfigDict(env_prefix="MEMORY_", env_file=None, extra="ignore", frozen=True)

    # --- storage ---------------------------------------------------------------------------------
    database_url: SecretStr | None = None
    """Postgres to use (for example a Supabase project's connection string). When unset, the manager starts
    an embedded PostgreSQL under `data_dir` and migrates it itself."""

    data_dir: Path = Field(default_factory=_default_data_dir)
    """Where the embedded PostgreSQL keeps its files, and the outage journal (`journal/`)."""
    embedded_shared_buffers_mb: int | None = Field(default=None, ge=16)
    """The embedded PostgreSQL's `shared_buffers` in MB; None: a quarter of the machine's memory, between 128 MB
    and 1 GB (applied when the server starts)."""

    auto_migrate: bool = True
    """Apply `supabase/migrations/` on open. Already-applied versions are skipped, using the same
    `supabase_migrations.schema_migrations` table as the Supabase CLI, so both can be mixed."""

    admin_database_url: SecretStr | None = None
    """An administrative role's connection string, for the service path (`MemoryAdmin`: migrations,
    erasing a user). Set it when `database_url` uses the least-privileged application role of
    `supabase/roles/memory_plugin_app.sql`; when unset, migrations run over `database_url`. With
    `auto_migrate`, the manager applies migrations through this URL when it is set."""

    pool_min_size: int = Field(default=1, ge=0)
    """Connections the pool keeps open."""

    pool_max_size: int = Field(default=10, ge=1)
    """Connections for user statements; the manager's one pool adds `background_concurrency` for the job queue."""

    connect_timeout_seconds: float = Field(default=5.0, gt=0)
    """How long to wait for a connection before raising `StoreUnavailableError`."""

    database_pooler: Literal["auto", "transaction", "session", "none"] = "auto"
    """The connection pooler in front of the database URLs (docs/supabase.md): `transaction` (Supavisor's port
    6543, PgBouncer's transaction mode) turns psycopg's prepared statements off on every connection the plugin
    opens, which such a pooler cannot keep; `session` and `none` change nothing; `auto`: `transaction` when the
    URL's port is 6543. Env `MEMORY_DATABASE_POOLER`."""

    # --- Supabase API (SupabaseStore) ------------------------------------------------------------------
    # For deployments that reach the database only through the project's REST API (PostgREST) with the
    # anon key and each user's own JWT; see `SupabaseStore.from_settings`. No service key is ever read.
    supabase_url: str | None = None
    """The Supabase project URL, e.g. `https://abcd.supabase.co` (used only by `SupabaseStore`)."""

    supabase_anon_key: SecretStr | None = None
    """The project's anon (publishable) key, sent as `apikey`; user data is always requested with the user's
    own access token, never with this key alone."""

    supabase_timeout_seconds: float = Field(default=5.0, gt=0)
    """Timeout of each request to the Supabase API (connect, read, write, pool); beyond it the operation
    raises `StoreUnavailableError`."""

    # --- short-term memory -------------------------------------------------------------------------
    max_messages_per_session: int = Field(default=20, ge=1)
    """Messages kept per session; older ones fall off."""

    session_ttl_seconds: float = Field(default=3600.0, gt=0)
    """A session untouched for this long is forgotten (1 hour by default)."""

    max_sessions: int = Field(default=100_000, ge=1)
    """Live sessions kept in RAM; beyond this the least recently active session is evicted."""

    max_message_chars: int = Field(default=20_000, ge=1)
    """Longest message accepted; longer input raises `InvalidMemoryInputError` instead of being truncated."""

    session_store_max_bytes: int = Field(default=512 * 1024 * 1024, ge=64 * 1024)
    """RAM budget of all sessions together, in (estimated) bytes: beyond it the least recently active sessions
    are evicted. A session is estimated from its text (messages, entity values, intents) plus a fixed cost per
    object fitted with `tracemalloc` (`session/store.py`; within 6 % of the RAM traced). 512 MiB holds the
    100,000 sessions of `max_sessions` with 2 short messages each (~3.6 kB), ~27,000 sessions of 20 messages
    of 300 characters (~19 kB), or ~1,300 full of the longest messages (20 × 20,000 characters, ~0.4 MB)."""

    max_sessions_per_user: int = Field(default=100, ge=1)
    """Live sessions of one user; a new one beyond it evicts that user's least recently active session, so a
    user opening sessions in a loop evicts their own, never another user's. Sessions used without a user are
    bounded only by `max_sessions` and `session_store_max_bytes`."""

    session_max_bytes_per_user: int = Field(default=16 * 1024 * 1024, ge=64 * 1024)
    """RAM budget of one user's sessions (estimated bytes, as `session_store_max_bytes`); beyond it that user's
    least recently active sessions are evicted (never the one being written). 16 MiB: ~40 sessions full of
    the longest messages, far more than a person has open at once."""

    max_session_entity_values_per_kind: int = Field(default=50, ge=1)
    """Entity values kept per kind in a session ("materials": 50 distinct materials); an update past it
    raises `SessionLimitError` and keeps nothing of that update."""

    max_session_entity_values: int = Field(default=200, ge=1)
    """Entity values of all kinds kept in a session (each value reaches the prompt); past it an update raises
    `SessionLimitError`."""

    max_session_intents: int = Field(default=50, ge=1)
    """Distinct intents kept in a session; a new one past it raises `SessionLimitError`."""

    # --- long-term memory ----------------------------------------------------------------------------
    max_fact_chars: int = Field(default=500, ge=10)
    """Longest extracted fact accepted. Facts are short statements; long text belongs in verbatim notes (see
    `max_note_chars`). At most `max_note_chars`."""

    max_note_chars: int = Field(default=16_000, ge=10)
    """Longest verbatim note accepted (a message someone wrote, stored by `remember`/`remember_many` or an
    import): message-sized, because ~2 % of everyday chat turns are longer than 500 characters and the longest
    seen reach ~2,000. Must not exceed the schema's `user_memory.content` length check (checked at start-up by
    `check_content_limit`)."""

    health_notes: HealthNotesConsent = "off"
    """What may be kept of health statements (`memory_plugin.privacy.HealthNotesConsent`): ``"off"`` (default)
    replaces the speaker's own clinical detail in notes with ``[health detail]`` and reduces clinical facts to
    a non-clinical `health_note` or drops them; ``"keep_notes"``, for deployments with the user's explicit
    consent, also keeps non-clinical health notes where a note would otherwise be dropped. Raw clinical detail
    (diagnosis, medication, dose, test result) is never stored in either mode."""

    write_rate_per_second: float = Field(default=100.0, ge=0)
    """Items (facts, notes, preferences…) one user may write per second once `write_burst` is spent; a write
    over the limit raises `MemoryLimitError` with `retry_after`. 0 turns the limit off. 100/s is far above what
    a conversation produces and far below what one user needs to slow everyone else down (a flood of 100,000
    facts in 65 s doubled a neighbour's write p50)."""

    max_facts_per_user: int = Field(default=200_000, ge=1)
    """Fact rows (current and history) one user may have; a write that would pass it raises `MemoryLimitError`
    and writes nothing. 200,000 is twice the largest history the benchmarks measure; a person's conversations
    produce a few thousand. Checked against a count read once per user and process, kept up to date by this
    process's writes and read again near the limit (other processes' writes are seen then)."""

    write_burst: int = Field(default=10_000, ge=1)
    """Items one user may write at once (an import of a long history: a LoCoMo conversation is ~700 turns)."""

    max_memory_block_chars: int = Field(default=12_000, ge=500)
    """The memory block given to an agent is cut to this many characters, whatever the session holds."""

    max_facts_in_context: int = Field(default=12, ge=0)
    """Facts placed in the context per call."""

    max_projects_in_context: int = Field(default=3, ge=0)
    """Most recent projects placed in the context."""

    max_patterns_in_context: int = Field(default=3, ge=0)
    """Most frequent request patterns placed in the context."""

    min_fact_confidence: float = Field(default=0.6, ge=0, le=1)
    """Facts below this confidence are never stored."""

    reinforcement_step: float = Field(default=0.1, ge=0, le=1)
    """Confidence added when a stored fact is stated again (bounded by 1.0)."""

    weight_importance: float = 0.6
    """Ranking weight of importance (1–5, scaled to 0–1)."""

    weight_confidence: float = 0.3
    """Ranking weight of confidence."""

    weight_recency: float = 0.1
    """Ranking weight of recency (1.0 when just reinforced, falling linearly to 0 over `recency_window_days`)."""

    recency_window_days: float = Field(default=30.0, gt=0)
    """Age at which a fact's recency boost reaches zero."""

    # --- memory quality (memory_plugin/quality/; README "Keeping memory small, true and current") -------------
    near_duplicate_threshold: float = Field(default=0.8, ge=0)
    """Trigram similarity (pg_trgm's, 0–1) at or above which a new fact reinforces a current fact of the same
    category instead of adding a row, when both have the same numbers/codes and negation. 0.8 merges rewordings
    that keep their words and keeps one-word substitutions apart; above 1 turns near-duplicate merging off."""

    dedup_embedding_threshold: float = Field(default=0.85, ge=0)
    """Cosine similarity (0–1) of two facts' embeddings (same model) at or above which a new fact reinforces a
    current fact of the same category instead of adding a row, when both have the same numbers/codes,
    negation and named values (`vocabulary`). Catches paraphrases trigrams miss ("Le
    gusta el aluminio 7075" / "Prefiere el aluminio 7075"). 0.85 was chosen on Spanish and English
    paraphrase pairs with the offline MiniLM (README); above 1 turns it off. Env
    `MEMORY_DEDUP_EMBEDDING_THRESHOLD`."""

    half_life_days: dict[str, float] = Field(default_factory=lambda: dict(_DEFAULT_HALF_LIFE_DAYS))
    """Days for a fact's confidence to halve without being stated again, per category (0: never decays).
    Categories left out keep their default (`quality/decay.py`: preference 180, requirement 365, constraint
    120, feedback 90, rejection 0, goal 90, routine 120, contact 365, health_note 180, fact 365). From the
    environment as JSON: `MEMORY_HALF_LIFE_DAYS='{"preference": 90}'`."""

    decay_floor: float = Field(default=0.2, ge=0, le=1)
    """Facts whose decayed confidence is below this never reach the prompt; `memory-plugin maintain` archives
    them (correctness does not depend on it running)."""

    # --- retention (`memory-plugin maintain`; docs/privacy.md) ---------------------------------------------------
    retention_raw_months: float = Field(default=12, ge=0)
    """Raw conversation data untouched this many months is deleted by `maintain`: chat histories (title, summary
    stay), conversations, Postgres sessions, checkpoints. Facts, slots, summaries stay. 0: kept forever."""
    retention_dead_job_days: float = Field(default=30, ge=0)
    """Dead background jobs older than this are deleted by `maintain` (0: kept, up to the cap)."""
    retention_max_dead_jobs: int = Field(default=10_000, ge=0)  # dead jobs kept, the newest (0: no cap)
    retention_checkpoint_days: float = Field(default=30, ge=0)
    """Workflow checkpoints older than this are deleted by `maintain` (0: by `retention_raw_months` only)."""
    retention_receipt_days: float = Field(default=90, ge=0)
    """Context receipts older than this are deleted by `maintain` (0: kept; the newest 100 per user)."""
    retention_applied_write_days: float = Field(default=30, ge=0)
    """Applied-write records (a replayed write applies once) older than this are deleted by `maintain`; keep
    them longer than any outage the journal must survive (0: kept forever)."""

    vocabulary: Annotated[Vocabulary, PlainValidator(_a_vocabulary), PlainSerializer(repr)] = Field(
        default_factory=lambda: DEFAULT_VOCABULARY, exclude=True, repr=False
    )
    """The domain's named values and slots (`quality/vocabulary.py`): which words name one value ("lunes",
    "monday": near-duplicates must name the same) and which subjects hold one current value (budget, lead
    time). The default is domain-free; pass a domain's own, e.g. `MemorySettings(vocabulary=SHOP_VOCABULARY)`
    (`agents/vocabulary.py`). Code only, not read from the environment."""

    vocabulary_module: str | None = None
    """`package.module:NAME` of the `Vocabulary` the command line's processes (`worker`, `serve`, `inspect`…)
    use instead of the generic one, e.g. `agents.vocabulary:SHOP_VOCABULARY`; code passes `vocabulary` instead."""

    max_rejections_in_context: int = Field(default=20, ge=0)
    """Current rejections ("never suggest X") placed in the context after the ranked facts, newest first."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except SettingsError as exc:
            # pydantic-settings fails before validation, with a traceback naming neither the variable nor a
            # valid value, when a MEMORY_* holding JSON (a dict or list setting) is not JSON.
            raise _not_json(exc) from None
        except ConfigurationError:
            raise
        except ValidationError as exc:
            # The plugin's error for bad input, still pydantic's for code that catches that.
            errors = [_without_secrets(e) for e in exc.errors()]
            names = sorted({f"MEMORY_{e['loc'][0]}".upper() for e in errors if e["loc"]})
            names += ["MEMORY_ENCRYPTION_KEYS"] if any("MEMORY_ENCRYPTION_" in e["msg"] for e in errors) else []
            title = f"{exc.title} ({', '.join(names)})" if names else exc.title
            raise ConfigurationError.from_exception_data(title, errors) from None

    @field_validator("data_dir", "database_url", "admin_database_url", mode="before")
    @classmethod
    def _not_empty(cls, value: object, info: Any) -> object:
        # An empty variable is a mistake, not a choice: MEMORY_DATA_DIR="" made a cluster in the current
        # directory, MEMORY_DATABASE_URL="" ran without any database. Unset means the default.
        if isinstance(value, str) and not value.strip():
            name = f"MEMORY_{info.field_name.upper()}"
            example = _EMPTY_EXAMPLES[info.field_name]
            raise ValueError(f"{name} is empty: unset it for the default, or give a value, e.g. {name}={example}")
        return value

    @model_validator(mode="after")
    def _fact_limit_within_note_limit(self) -> MemorySettings:
        if self.max_fact_chars > self.max_note_chars:
            raise ValueError(
                f"max_fact_chars ({self.max_fact_chars}) is larger than max_note_chars ({self.max_note_chars}): "
                "an extracted fact is a short statement drawn from a note; raise MEMORY_MAX_NOTE_CHARS or lower "
                "MEMORY_MAX_FACT_CHARS"
            )
        return self

    def check_content_limit(self, schema_max_chars: int) -> None:
        """Raise `MemoryPluginError` when the text limits exceed what the schema stores.

        `schema_max_chars` is the upper bound of the `user_memory.content` length check of the connected
        database; call this at start-up so a too-long note fails there, with this message, instead of as a
        `StoreError` inside Postgres for a whole batch."""
        for name, value in (("max_note_chars", self.max_note_chars), ("max_fact_chars", self.max_fact_chars)):
            if value > schema_max_chars:
                raise MemoryPluginError(
                    f"{name} is {value} characters but the database stores at most {schema_max_chars} per memory "
                    f"(the user_memory.content check): set MEMORY_{name.upper()}={schema_max_chars} or less, or "
                    "apply the migration that raises the check"
                )

    @field_validator("half_life_days")
    @classmethod
    def _known_categories(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(_DEFAULT_HALF_LIFE_DAYS))
        if unknown:
            raise ValueError(f"unknown fact categories {unknown}; known: {sorted(_DEFAULT_HALF_LIFE_DAYS)}")
        if any(days < 0 for days in value.values()):
            raise ValueError("half-lives must be >= 0 days (0: no decay)")
        return {**_DEFAULT_HALF_LIFE_DAYS, **value}

    # --- embeddings and search (README: "Search and remember") -------------------------------------------
    # Weights chosen on LoCoMo's development split; memory_plugin/retrieval/weights.py shows the measurements.
    embedding_model: str | None = "auto"
    """Embeddings of facts and questions: `auto` (OpenAI `text-embedding-3-small` at 384 dimensions when
    `OPENAI_API_KEY` is set, else the offline all-MiniLM-L6-v2 of the `[local]` extra, else none), `local`,
    `none` (text-only search), or any pydantic-ai embedding model name (asked for 384 dimensions). Changing it
    leaves older facts without a vector of the new model until `memory-plugin reembed`."""

    embedding_batch_size: int = Field(default=64, ge=1)
    """Facts embedded per model call at write time and by `reembed`."""

    local_embedding_runtime: LocalRuntime = "auto"
    """What runs the offline model (`local`), for facts and questions: `auto` and `onnx` (onnxruntime; torch, with
    one warning, when it cannot be used), `torch`. onnxruntime gives the same vectors (checked against torch
    when its graph is exported), a question in ~4 ms instead of ~10, and a new process's first vector without
    torch's import (~4 s); the graph is exported once (bootstrap, or the first use) and cached in
    `data_dir/onnx/`. Env `MEMORY_LOCAL_EMBEDDING_RUNTIME`."""

    search_weight_text: float = Field(default=1.0, ge=0)
    """Full-text relevance (BM25 over English stems, Spanish and English stop words dropped; normalised by the
    best candidate's)."""

    search_weight_vector: float = Field(default=1.0, ge=0)
    """Cosine similarity of the question's and the fact's embeddings."""

    search_weight_neighbour: float = Field(default=0.5, ge=0)
    """Best cosine similarity of the fact just before or after it in its session (turns come in pairs)."""

    search_weight_trigram: float = Field(default=0.0, ge=0)
    """Trigram word similarity (typos, partial names); 0 because it added nothing measurable on LoCoMo
    (+0.002 recall@10) and costs a comparison per candidate."""

    search_weight_speaker: float = Field(default=0.2, ge=0)
    """Boost of facts whose `metadata["speaker"]` is the one person the question names."""

    search_weight_date: float = Field(default=0.2, ge=0)
    """Boost of facts stated (`occurred_at`) inside a date the question names ("on 13 October 2023")."""

    search_weight_time: float = Field(default=0.1, ge=0)
    """Boost, for "when" questions, of facts whose text holds a time expression ("yesterday", "el sábado")."""

    search_weight_importance: float = Field(default=0.05, ge=0)
    """Weight of importance in the search score (small: relevance first, then importance, confidence and recency)."""

    search_weight_confidence: float = Field(default=0.05, ge=0)
    """Weight of confidence in the search score."""

    search_weight_recency: float = Field(default=0.05, ge=0)
    """Weight of recency in the search score (over `recency_window_days`)."""

    search_date_slack_days: float = Field(default=14.0, gt=0)
    """A fact stated this many days outside a date the question names gets no date boost (linear in between)."""

    search_candidates: int = Field(default=150, ge=1, le=10_000)
    """Facts taken from each channel (vector, full text, date) before the final ranking (the vector channel
    takes half as many, at least the search's limit, when it goes through the HNSW index)."""

    search_rerank_candidates: int = Field(default=100, ge=0, le=1000)
    """The hybrid score's best this many facts are re-ranked by how they cluster (same session, neighbouring
    turns) and the names the question holds (`retrieval/rerank.py`); 0 turns the reranker off."""

    search_exact_scan_below: int = Field(default=2000, ge=0)
    """Users with fewer vectors than this are scanned exactly; above, through the HNSW index, unless they are a
    small share of their partition of the search table: the threshold grows by `k / (share × ef_search)`, as
    the index walk must pass over the other users' rows (`supabase/schemas/22_memory_search.sql`)."""

    search_text_scan_limit: int = Field(default=500, ge=1)
    """Postings read per question word: bounds the cost of very common words in a long history."""

    max_search_chars: int = Field(default=2000, ge=1)
    """Longest question accepted by `search` (longer raises `InvalidMemoryInputError`)."""

    # --- extraction ------------------------------------------------------------------------------------
    extraction_model: str | None = None
    """pydantic-ai model name for fact extraction, e.g. `openai:gpt-4o-mini`. Unset: the offline rule-based
    extractor (Spanish and English explicit statements)."""

    agent_model: str | None = None
    """pydantic-ai model for the demo agents (classifier, budget agent). Unset: deterministic offline models."""

    extract_every_n_messages: int = Field(default=4, ge=1)
    """Cadence: extract once this many *user* messages with content are waiting in a session (the
    assistant's answers go along as context; small talk does not count). One call covers every message not
    extracted yet. See `memory_plugin.extraction.policy`."""

    extract_on_explicit_triggers: bool = True
    """Extract at once when the user gives a memory instruction ("recuerda…", "remember…", "no me
    sugieras…", "don't suggest…", "ya no…", "from now on", "a partir de ahora"…)."""

    extract_at_end_of_request: bool = True
    """Extract when a request is complete (the budget-request workflow says so when the user confirms)."""

    extraction_candidate_facts: int = Field(default=30, ge=0)
    """How many of the user's current facts (best-ranked first) the extractor is shown, with their ids, so that
    a new fact can name the one it replaces ("the budget is now 2000 €") and a restated fact can reuse the
    stored wording. 0: none."""

    date_timezone: str | None = None
    """IANA timezone (e.g. `Europe/Madrid`) in which relative dates in facts ("mañana", "next Friday") are
    resolved: the users' local calendar. Unset: the message timestamp's own timezone (UTC for messages
    created without one), so "mañana" said at 23:30 in Madrid would be counted from the UTC date."""

    @field_validator("date_timezone")
    @classmethod
    def _known_timezone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise ValueError(f"unknown timezone {value!r}; use an IANA name such as 'Europe/Madrid'") from exc
        return value

    extraction_extra_triggers: list[str] = Field(default_factory=list)
    """More phrases that trigger an immediate extraction (case- and accent-insensitive substrings); from the
    environment as a JSON list: `MEMORY_EXTRACTION_EXTRA_TRIGGERS='["anota que"]'`."""

    # --- background extraction (docs/background.md) ---------------------------------------------------------
    background_extraction: bool = True
    """The capability and the budget workflow queue extraction and return at once (a background worker runs
    it). False: they extract before the run returns, as `extract_if_due` does (the answer waits for the
    extraction model)."""

    background_worker: bool = True
    """Run a worker in this process. False: only queue; a separate `memory-plugin worker` drains the queue
    (Postgres only: without Postgres the queue is in this process's RAM and nothing else can drain it)."""

    background_concurrency: int = Field(default=4, ge=1)
    """Jobs a worker runs at once (different sessions; a session's jobs always run one at a time)."""

    background_max_pending_jobs: int = Field(default=10_000, ge=1)
    """Waiting jobs beyond which a trigger that would add a job for a user already holding one is deferred: its
    messages wait in the user's backlog until there is room (a session's waiting job always absorbs new
    messages; docs/background.md)."""

    background_max_pending_jobs_per_user: int = Field(default=100, ge=1)
    """Waiting jobs of one user beyond which that user's trigger is deferred as above (at most 10 × this many
    deferred sessions per user, then refused: the messages stay pending in the session). A user at this limit, or
    one filling the whole queue, never refuses another user's extraction: the queue's limit refuses only users
    already holding a waiting job. 100: a user's sessions each hold one waiting job at most."""

    background_lease_seconds: float = Field(default=120.0, gt=0)
    """How long a claimed job is reserved for its worker (renewed while it runs); a crashed worker's jobs are
    claimed again after this."""

    background_max_attempts: int = Field(default=5, ge=1)
    """Failed attempts after which a job is dead (kept and shown; `memory-plugin worker --retry-dead`)."""

    background_retry_base_seconds: float = Field(default=2.0, gt=0)
    """First retry delay of a failed job, doubled at each attempt (with jitter)."""

    background_retry_max_seconds: float = Field(default=600.0, gt=0)
    """Longest retry delay of a failed job."""

    background_poll_seconds: float = Field(default=1.0, gt=0)
    """How often an idle worker looks for jobs queued by other processes and retries coming due (a job queued
    in the worker's own process wakes it at once)."""

    background_close_timeout_seconds: float = Field(default=10.0, ge=0)
    """How long `close()` lets queued and running jobs finish; what is left stays queued (in Postgres) or is
    lost (in-process queue), with a warning."""

    # --- prompt formatting --------------------------------------------------------------------------------
    recent_messages_in_prompt: int = Field(default=6, ge=0)
    """How many of the session's last messages the memory block repeats for the agent."""

    message_chars_in_prompt: int = Field(default=280, ge=20)
    """Each repeated message is cut to this many characters in the memory block."""

    # --- context budget, slots and rolling summary (memory_plugin/context/) ----------------------------------
    context_budget_tokens: int = Field(default=1000, ge=50)
    """Tokens memory and recent history may take together in each request (the current message and the
    agent's own instructions are not counted)."""

    context_slots_tokens: int = Field(default=250, ge=0)
    """Most the structured slots (goal, constraints, rejections, preferences…) may take."""

    context_summary_tokens: int = Field(default=600, ge=0)
    """Most the rolling summary may take (a longer summary is cut at a line boundary)."""

    context_summary_pressure_tokens: int = Field(default=450, ge=0)
    """What the summary is cut to when memory and history do not fit the budget."""

    context_min_recent_messages: int = Field(default=4, ge=0)
    """Recent messages always sent, whatever the budget (moved back so a tool call keeps its result)."""

    token_model: str | None = None
    """Model whose tokenizer counts the budget (`openai:gpt-4o`…). Unset: `agent_model`; OpenAI models are
    counted exactly offline (o200k_base/cl100k_base), others approximated with o200k_base."""

    summary_model: str | None = None
    """pydantic-ai model that writes the rolling summary. Unset: `extraction_model`; neither: an extractive
    summary built offline (it says it is one)."""

    summary_min_new_chars: int = Field(default=600, ge=1)
    """Rewrite the summary when the messages since its last version hold more than this many characters."""

    summary_every_n_messages: int = Field(default=8, ge=1)
    """Rewrite the summary every this many messages (user and assistant)."""

    summary_on_topic_change: bool = True
    """Rewrite the summary when the user changes the subject ("cambiando de tema", "another thing"…)."""

    summary_on_decision: bool = True
    """Rewrite the summary when the user decides or rejects something ("vamos con…", "no me sugieras…")."""

    summary_with_extraction: bool = True
    """Rewrite the summary only on turns where a fact extraction runs, in the extraction's own model call with
    an LLM extractor (the summary's triggers then wait for the extraction's cadence or memory instructions: on
    a 300-turn conversation 0.25 model calls per user turn instead of 0.40, the summary at most 5 turns old).
    False: the summary also has its own calls on its own triggers."""

    summary_resync_days: float = Field(default=7.0, gt=0)
    """Rebuild the summary from the user's current facts when its last rebuild is this old."""

    # --- background housekeeping ----------------------------------------------------------------------------
    session_sweep_interval_seconds: float = Field(default=60.0, gt=0)
    """How often the manager's background task releases expired sessions' RAM. Expired sessions are never
    visible even between sweeps: every access expires what is due first."""

    # --- database outages (ResilientStore) ------------------------------------------------------------------
    # When Postgres is unreachable, reads fall back to the last context read and writes go to a fsynced
    # journal under `data_dir/journal/`, replayed in order, exactly once, when it returns. README: "When the
    # database is down".
    resilient_store: bool = True
    """Wrap the database store the manager creates in `ResilientStore` (cache, journal, background
    reconnection). False: an unreachable database fails `MemoryManager.create` and raises on writes."""

    require_pg_memory: bool = Field(
        default=False,
        validation_alias=AliasChoices("require_pg_memory", "MEMORY_REQUIRE_PG_MEMORY", "REQUIRE_PG_MEMORY"),
    )
    """No fallback: an unreachable database raises `StoreUnavailableError` (at startup, on reads and on
    writes) instead of using the cache and the journal. Also read from plain `REQUIRE_PG_MEMORY`."""

    fallback_cache_users: int = Field(default=1000, ge=0)
    """Users whose last long-term context is kept in RAM to answer reads during an outage (LRU)."""

    retry_base_seconds: float = Field(default=0.5, gt=0)
    """First delay before retrying to reach the database in the background; doubles per failure (jittered)."""

    retry_max_seconds: float = Field(default=60.0, gt=0)
    """Longest delay between two background attempts."""

    outage_log_interval_seconds: float = Field(default=60.0, ge=0)
    """Connection errors are logged at WARNING at most once per interval; the others are counted (see
    `MemoryManager.backend_status`) and the next warning says how many."""

    # --- REST API and chats (`memory-plugin serve`; docs/chats.md) ------------------------------------------
    jwt_secret: SecretStr | None = None
    """The Supabase project's JWT secret: the API accepts HS256 user tokens signed with it."""

    jwt_jwks_url: str | None = None
    """The project's JWKS endpoint (`https://<ref>.supabase.co/auth/v1/.well-known/jwks.json`), for user tokens
    signed with asymmetric keys."""

    jwt_audience: str = Field(default="authenticated", min_length=1)
    """The `aud` the API requires in user tokens: "authenticated" is what Supabase Auth issues; a token without
    it or for another audience is refused (401)."""

    api_max_body_bytes: int = Field(default=1_000_000, ge=1024)
    """Largest request body the API accepts (413 beyond)."""

    api_rate_per_second: float = Field(default=10.0, ge=0)
    """Requests per second one user may make to the API once their burst is spent (429 with `Retry-After`
    beyond it; per server process); 0: no limit."""

    api_rate_burst: int = Field(default=100, ge=1)
    """Requests one user may make to the API at once before `api_rate_per_second` applies."""

    api_cors_origins: str = ""
    """Browser origins allowed to call the API, comma-separated (`https://app.example,http://localhost:5173`,
    or `*`); empty: no CORS headers, so browsers allow only same-origin pages."""

    api_dev_tokens: bool = False
    """Allow `memory-plugin token --user UUID` to mint user tokens with `jwt_secret`, and the dashboard's
    development sign-in (a user id, no password) (development only: anyone who can run it can act as any user)."""

    chat_summary_model: str | None = None
    """pydantic-ai model writing chat summaries and titles (e.g. "openai:gpt-4o-mini"); unset: the offline
    extractive summary."""

    max_checkpoints: int = Field(default=20, ge=1, le=10_000)
    """Workflow checkpoints kept per session; each save deletes the older ones beyond it."""

    session_backend: Literal["memory", "postgres", "redis"] = "memory"
    """Where short-term sessions live: "memory" (this process's RAM), "postgres" (the database in use, shared
    by every worker; `memory_private.memory_sessions`) or "redis" (`redis_url`, shared by every worker; the
    `redis` extra)."""

    redis_url: SecretStr | None = None
    """The Redis server of `session_backend="redis"` (`redis://host:6379/0`; may carry a password)."""

    # --- encryption at rest of sensitive facts (docs/privacy.md: "Sensitive facts, sealed") ------------------
    encryption_keys: SecretStr | None = None
    """AES-GCM keys that seal sensitive facts, as comma-separated `id:base64` pairs (16, 24 or 32 bytes each):
    `MEMORY_ENCRYPTION_KEYS=k1:$(openssl rand -base64 32)`. Unset: nothing is sealed, and a write marked
    `sensitive=True` is refused (`EncryptionKeyError`). Keep an old key listed until `memory-plugin rotate-key`
    has re-sealed its rows. Needs the `crypto` extra (`cryptography`)."""

    encryption_active_key: str | None = None
    """The id among `encryption_keys` new writes and `rotate-key` seal with; unset: the first pair listed."""

    encryption_hash_key: SecretStr | None = None
    """Base64 key (at least 16 bytes) of the HMAC that replaces a sealed fact's plain content hash, so an exact
    repeat still reinforces its row; required with `encryption_keys`, and kept when they rotate (changing it
    stops repeats of already-sealed facts from meeting their row)."""

    sensitive_categories: tuple[str, ...] = ("health_note", "contact")
    """Fact categories sealed at rest whenever `encryption_keys` are set, whatever the writer says (a JSON list
    in the environment: `MEMORY_SENSITIVE_CATEGORIES='["health_note","contact","routine"]'`); any item can
    also be marked `sensitive=True` by the application."""

    @field_validator("sensitive_categories")
    @classmethod
    def _known_sensitive_categories(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(value) - set(_DEFAULT_HALF_LIFE_DAYS))
        if unknown:
            raise ValueError(
                f"MEMORY_SENSITIVE_CATEGORIES names unknown fact categories {unknown}; known:"
                f" {sorted(_DEFAULT_HALF_LIFE_DAYS)}, e.g. MEMORY_SENSITIVE_CATEGORIES='[\"health_note\"]'"
            )
        return value

    @model_validator(mode="after")
    def _readable_key_ring(self) -> MemorySettings:
        self.key_ring()  # a malformed key fails at start, naming its variable, not at the first sensitive write
        return self

    def key_ring(self) -> KeyRing | None:
        """The parsed encryption keys (None: encryption is off); ValueError names a malformed variable."""
        if self.encryption_keys is None:
            if self.encryption_active_key or self.encryption_hash_key is not None:
                raise ValueError(
                    "MEMORY_ENCRYPTION_ACTIVE_KEY or MEMORY_ENCRYPTION_HASH_KEY is set without"
                    f" MEMORY_ENCRYPTION_KEYS; set the keys too, e.g. {KEY_EXAMPLE}"
                )
            return None
        hash_key = self.encryption_hash_key.get_secret_value() if self.encryption_hash_key is not None else None
        return parse_key_ring(self.encryption_keys.get_secret_value(), self.encryption_active_key, hash_key)


_EMPTY_EXAMPLES = {
    "data_dir": "~/.local/share/memory-plugin",
    "database_url": "postgresql://memory_plugin_app.<project ref>:<password>@<pooler host>:6543/postgres",
    "admin_database_url": "postgresql://postgres.<project ref>:<password>@<pooler host>:5432/postgres",
}


def _without_secrets(error: Any) -> Any:
    """A validation error without its input when that input may hold a secret: a whole-model check's input is
    every value (database URLs with passwords, encryption keys), and a secret field's is the secret."""
    loc = error["loc"]
    field = MemorySettings.model_fields.get(str(loc[0])) if loc else None
    secret = not loc or (field is not None and "SecretStr" in str(field.annotation))
    return {**error, "input": "(hidden)"} if secret else error


def _not_json(exc: SettingsError) -> ConfigurationError:
    """A `ConfigurationError` for a JSON setting whose environment value is not JSON, with an example."""
    match = re.search(r'field "(\w+)"', str(exc))
    field = match.group(1) if match else "settings"
    name = f"MEMORY_{field.upper()}"
    raw = next((v for k, v in os.environ.items() if k.upper() == name), None)
    info = MemorySettings.model_fields.get(field)
    default = info.get_default(call_default_factory=True) if info is not None else None
    sample = dict(list(default.items())[:1]) if isinstance(default, dict) else list(default or [])[:1]
    message = f"{name} must be JSON, e.g. {name}='{json.dumps(sample)}'; got {raw!r}"
    return ConfigurationError.from_exception_data(
        "MemorySettings",
        [{"type": "value_error", "loc": (field,), "input": raw, "ctx": {"error": ValueError(message)}}],
    )
