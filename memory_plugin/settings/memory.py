"""`MemorySettings`: every knob of the plugin, grouped by concern, each read from its `MEMORY_*` variable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from ..crypto.keys import KeyRing
from ..errors import ConfigurationError
from .api import ApiNames, ApiSettings
from .background import BackgroundNames, BackgroundSettings
from .context import ContextNames, ContextSettings
from .database import DatabaseNames, DatabaseSettings, SupabaseNames, SupabaseSettings
from .embeddings import EmbeddingNames, EmbeddingSettings
from .encryption import EncryptionNames, EncryptionSettings
from .environment import FlatEnvironment, configuration_error
from .extraction import ExtractionNames, ExtractionSettings
from .flat import Flat, as_values, flat_names, routed
from .outage import OutageNames, OutageSettings
from .quality import QualityNames, QualitySettings
from .retention import RetentionNames, RetentionSettings
from .search import SearchNames, SearchSettings
from .sessions import SessionNames, SessionSettings
from .summary import SummaryNames, SummarySettings
from .writes import WriteNames, WriteSettings

__all__ = ["MemorySettings"]


class MemorySettings(
    DatabaseNames,
    SupabaseNames,
    SessionNames,
    WriteNames,
    ContextNames,
    SummaryNames,
    QualityNames,
    RetentionNames,
    EmbeddingNames,
    SearchNames,
    ExtractionNames,
    BackgroundNames,
    OutageNames,
    ApiNames,
    EncryptionNames,
    BaseSettings,
):
    """Settings for [`MemoryManager`][memory_plugin.MemoryManager], one group per concern.

    Read a value from its group: `settings.search.candidates`, `settings.sessions.ttl_seconds`. Every value
    is set from the environment by its variable, unchanged from before the groups (`MEMORY_SEARCH_CANDIDATES`,
    `MEMORY_SESSION_TTL_SECONDS`; docs/configuration.md lists them), or passed directly, by group or by the
    variable's flat name: `MemorySettings(search=SearchSettings(candidates=50))`,
    `MemorySettings(search_candidates=50)`. The flat names also read (`settings.search_candidates`) and copy
    (`settings.model_copy(update={"search_candidates": 50})`, or the validated `settings.replace(...)`): they are
    kept for compatibility, the groups are the API. A group given whole takes no environment variable.
    """

    model_config = SettingsConfigDict(env_prefix="MEMORY_", env_file=None, extra="ignore", frozen=True)

    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    """The Postgres in use: URLs, the embedded server, the pool."""

    supabase: SupabaseSettings = Field(default_factory=SupabaseSettings)
    """The Supabase API of `SupabaseStore`."""

    sessions: SessionSettings = Field(default_factory=SessionSettings)
    """Short-term sessions: backend, lifetime, bounds."""

    writes: WriteSettings = Field(default_factory=WriteSettings)
    """What a write may hold, how fast one user may write."""

    context: ContextSettings = Field(default_factory=ContextSettings)
    """What a request carries from memory: facts, ranking, recent messages, token budget."""

    summary: SummarySettings = Field(default_factory=SummarySettings)
    """The rolling summary and the chats' summaries."""

    quality: QualitySettings = Field(default_factory=QualitySettings)
    """Near-duplicates, decay, the domain's vocabulary."""

    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    """How long `maintain` keeps raw data."""

    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    """The embedding model and what runs it."""

    search: SearchSettings = Field(default_factory=SearchSettings)
    """Hybrid search: weights, candidates, scan bounds."""

    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
    """Fact extraction: model, cadence, triggers."""

    background: BackgroundSettings = Field(default_factory=BackgroundSettings)
    """The extraction job queue and its worker."""

    outage: OutageSettings = Field(default_factory=OutageSettings)
    """Reads and writes while the database is unreachable."""

    api: ApiSettings = Field(default_factory=ApiSettings)
    """The REST API: tokens, request bounds, CORS."""

    encryption: EncryptionSettings = Field(default_factory=EncryptionSettings)
    """Keys that seal sensitive facts, and which facts are sensitive."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**routed(values, FLAT_NAMES))  # flat names into their groups, above the environment
        except ConfigurationError:
            raise
        except ValidationError as exc:
            # The plugin's error for bad input, naming the variable; still pydantic's for code that catches that.
            raise configuration_error(exc, MemorySettings, FLAT_NAMES) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments first, then the `MEMORY_*` variables by their flat names (no dotenv or secrets files)."""
        return init_settings, FlatEnvironment(settings_cls, FLAT_NAMES)

    @model_validator(mode="before")
    @classmethod
    def _flat_names_into_groups(cls, data: Any) -> Any:
        # `MemorySettings.model_validate({"search_candidates": 5})` takes flat names like the constructor.
        return routed(data, FLAT_NAMES) if isinstance(data, Mapping) else data

    @classmethod
    def flat_names(cls) -> Mapping[str, Flat[Any]]:
        """Every flat name (`search_candidates`), with its group field and its environment variables."""
        return FLAT_NAMES

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's copy, not validated; `update` may name groups (`{"search": SearchSettings(...)}`), a
        group's fields (`{"search": {"candidates": 5}}`) or flat names (`{"search_candidates": 5}`)."""
        if update:
            update = {
                key: getattr(self, key).model_copy(update=value)
                if key in type(self).model_fields and isinstance(value, Mapping)
                else value
                for key, value in routed(update, FLAT_NAMES).items()
            }
        return super().model_copy(update=update, deep=deep)

    def replace(self, **changes: Any) -> Self:
        """A validated copy with `changes`, by flat name or by group: `settings.replace(search_candidates=50)`.

        Unlike `model_copy`, a value that cannot be meant raises `ConfigurationError`; the environment is not
        read again (the copy keeps this one's values)."""
        values: dict[str, Any] = {name: as_values(getattr(self, name)) for name in type(self).model_fields}
        for key, value in routed(changes, FLAT_NAMES).items():
            values[key] = {**values[key], **value} if key in values and isinstance(value, Mapping) else value
        return type(self)(**values)

    def key_ring(self) -> KeyRing | None:
        """The parsed encryption keys (None: encryption is off); ValueError names a malformed variable."""
        return self.encryption.key_ring()

    def check_content_limit(self, schema_max_chars: int) -> None:
        """Raise `MemoryPluginError` when the text limits exceed what the schema stores (`WriteSettings`)."""
        self.writes.check_content_limit(schema_max_chars)


FLAT_NAMES: Mapping[str, Flat[Any]] = flat_names(MemorySettings)
"""Every flat name of `MemorySettings`, by name."""
