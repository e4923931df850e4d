"""Configuration: every knob of the plugin, grouped by concern, read from `MEMORY_*` environment variables.

`MemorySettings` (`memory.py`) holds one group per concern, each a frozen pydantic model in its own module:
`settings.database` and `settings.supabase` (`database.py`), `settings.sessions`, `settings.writes`,
`settings.context`, `settings.summary`, `settings.quality`, `settings.retention`, `settings.embeddings`,
`settings.search`, `settings.extraction`, `settings.background`, `settings.outage`, `settings.api`,
`settings.encryption`. **The groups are the API**: read `settings.search.candidates`, build
`MemorySettings(search=SearchSettings(candidates=50))`.

Every environment variable keeps its name (`MEMORY_SEARCH_CANDIDATES`), and so does the flat name it is made of:
`MemorySettings(search_candidates=50)`, `settings.search_candidates`, `settings.model_copy(update={
"search_candidates": 50})` and `settings.replace(search_candidates=50)` (validated) all still work, for the code
written before the groups. Each group module declares its flat names next to its fields (`Flat`, `flat.py`);
`environment.py` reads the variables by those names and names them again in errors.
"""

from __future__ import annotations

from .api import ApiSettings
from .background import BackgroundSettings
from .context import ContextSettings
from .database import DatabaseSettings, SupabaseSettings, default_data_dir
from .embeddings import EmbeddingSettings, LocalRuntime
from .encryption import EncryptionSettings
from .extraction import ExtractionSettings
from .flat import Flat, SettingsGroup
from .memory import MemorySettings
from .outage import OutageSettings
from .quality import QualitySettings
from .retention import RetentionSettings
from .search import SearchSettings
from .sessions import SessionSettings
from .summary import SummarySettings
from .writes import WriteSettings

__all__ = [
    "ApiSettings",
    "BackgroundSettings",
    "ContextSettings",
    "DatabaseSettings",
    "EmbeddingSettings",
    "EncryptionSettings",
    "ExtractionSettings",
    "Flat",
    "LocalRuntime",
    "MemorySettings",
    "OutageSettings",
    "QualitySettings",
    "RetentionSettings",
    "SearchSettings",
    "SessionSettings",
    "SettingsGroup",
    "SummarySettings",
    "SupabaseSettings",
    "WriteSettings",
    "default_data_dir",
]
