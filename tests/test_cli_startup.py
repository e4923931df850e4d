"""The CLI's quick commands (`status`, `inspect`, `db-url`, `stop`) start without importing what they never use:
pydantic-ai alone took 1.1 s of a 1.7 s start, torch and the embedding model several seconds more.

Each check runs in a fresh interpreter (the test process has everything imported already). Times are measured
by `python -m bench.cli_startup`, never asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import memory_plugin

ROOT = Path(__file__).resolve().parent.parent

HEAVY = ("pydantic_ai", "torch", "sentence_transformers", "transformers", "fastapi", "uvicorn")
"""Libraries none of the quick commands needs."""


def run_python(code: str, env: dict[str, str] | None = None) -> dict[str, object]:
    """Run `code` in a fresh interpreter; it prints one JSON object: what -> heavy modules then imported."""
    environ = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    prelude = f"import json, sys\nHEAVY = {HEAVY!r}\ndef heavy():\n    return [m for m in HEAVY if m in sys.modules]\n"
    result = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    loaded: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded


def test_importing_the_cli_and_the_package_loads_no_heavy_library() -> None:
    loaded = run_python(
        """
        import memory_plugin.cli
        after_cli = heavy()
        from memory_plugin import MemoryManager, MemorySettings, InMemoryStore, Message
        print(json.dumps({"cli": after_cli, "package": heavy()}))
        """
    )
    assert loaded == {"cli": [], "package": []}


@pytest.mark.slow
def test_status_inspect_db_url_and_stop_run_without_pydantic_ai_or_the_embedding_model(
    database_url: str, tmp_path: Path
) -> None:
    # The default embedding setting (`auto`) picks the offline model when it is installed: opening the memory
    # must not build it, nor import pydantic-ai to wrap it, until a vector is needed.
    loaded = run_python(
        f"""
        from memory_plugin.cli import app

        def run(*args):
            app(list(args), standalone_mode=False)
            return heavy()

        seen = {{}}
        seen["status"] = run("status")
        seen["inspect"] = run("inspect", "--user", "5f0c7a1e-0000-4000-8000-000000000001")
        seen["db-url"] = run("db-url")
        seen["stop"] = run("stop", "--data-dir", {str(tmp_path)!r})
        print(json.dumps(seen))
        """,
        env={"MEMORY_DATABASE_URL": database_url, "MEMORY_EMBEDDING_MODEL": "auto"},
    )
    assert loaded == {"status": [], "inspect": [], "db-url": [], "stop": []}


@pytest.mark.slow
def test_the_offline_embedder_imports_pydantic_ai_when_first_used(tmp_path: Path) -> None:
    loaded = run_python(
        f"""
        from pathlib import Path
        from memory_plugin.embeddings import local_embedder

        embedder = local_embedder(runtime="torch", cache_dir=Path({str(tmp_path)!r}))
        made = heavy()
        model = embedder.embedder.model  # what the first vector does first (the weights load later still)
        print(json.dumps({{"made": made, "used": heavy(), "model": type(model).__name__}}))
        """
    )
    assert loaded == {"made": [], "used": ["pydantic_ai"], "model": "LocalEmbeddingModel"}


@pytest.mark.parametrize("name", memory_plugin.__all__)
def test_every_public_name_is_importable_from_the_package(name: str) -> None:
    value = getattr(memory_plugin, name)
    assert value is not None
    assert name in dir(memory_plugin)
    namespace: dict[str, object] = {}
    exec(f"from memory_plugin import {name}", namespace)
    assert namespace[name] is value


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        _ = memory_plugin.NoSuchThing  # type: ignore[attr-defined]


def test_a_submodule_is_reachable_as_an_attribute_of_the_package() -> None:
    """`import memory_plugin` then `memory_plugin.store.X` keeps working although nothing loads up front."""
    code = "import memory_plugin; print(memory_plugin.store.InMemoryStore.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "InMemoryStore"


def test_the_settings_and_the_embedder_compile_no_privacy_filter() -> None:
    # A fresh process's first vector needs the settings and the embedder, not the filters (~0.1 s of CPU to
    # compile their patterns); the package still hands every filter out on first use.
    loaded = run_python(
        """
        from memory_plugin import MemorySettings
        from memory_plugin.embeddings import default_embedder
        default_embedder(MemorySettings(embedding_model="local"))
        filters = sorted(m for m in sys.modules if m.startswith("memory_plugin.privacy."))
        from memory_plugin.privacy import sanitize_fact_text, HealthNotesConsent
        print(json.dumps({"filters": filters, "on_use": sanitize_fact_text.__module__}))
        """
    )
    assert loaded == {"filters": ["memory_plugin.privacy.health_consent"], "on_use": "memory_plugin.privacy.policy"}
