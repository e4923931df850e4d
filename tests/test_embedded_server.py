"""The embedded default server starts with the memory_plugin's own PostgreSQL settings."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from memory_plugin import MemorySettings
from memory_plugin.database import EmbeddedPostgres
from memory_plugin.database.embedded import SETTINGS_FILE, default_shared_buffers_mb


def _shared_buffers_mb(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("select pg_size_bytes(current_setting('shared_buffers')) / 1048576").fetchone()
    assert row is not None
    return int(str(row[0]))


@pytest.mark.slow
async def test_shared_buffers_follow_the_setting_and_default_to_a_share_of_memory(tmp_path: Path) -> None:
    chosen = EmbeddedPostgres(tmp_path, shared_buffers_mb=48)
    try:
        url = await asyncio.to_thread(chosen.start)
        assert _shared_buffers_mb(url) == 48
    finally:
        await asyncio.to_thread(chosen.stop)

    default = EmbeddedPostgres(tmp_path)  # the same cluster, restarted with the default
    try:
        url = await asyncio.to_thread(default.start)
        assert _shared_buffers_mb(url) == default_shared_buffers_mb()
    finally:
        await asyncio.to_thread(default.stop)

    assert 128 <= default_shared_buffers_mb() <= 1024
    conf = (tmp_path / "postgres" / "postgresql.conf").read_text()
    assert conf.count(f"include_if_exists = '{SETTINGS_FILE}'") == 1  # two starts, one include


def test_a_too_small_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="embedded_shared_buffers_mb"):
        MemorySettings(embedded_shared_buffers_mb=8)
    with pytest.raises(ValueError, match="shared_buffers_mb must be at least 16"):
        EmbeddedPostgres(Path("unused"), shared_buffers_mb=8)  # refused when built, not when started
