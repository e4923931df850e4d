"""The wheel users install into their own project: it carries only `memory_plugin` (and its SQL), installs
beside OpenAI's Agents SDK (import name `agents`) without shadowing it, and runs the README's pydantic-ai example
from a directory outside the repository, migrating the embedded database from the packaged SQL.

Needs PyPI (pip builds the wheel with hatchling and installs ~70 distributions into a fresh virtualenv; pip's own
cache spares the downloads after the first run): 4.6 min of wall time, 47 s of CPU, at load 10 on 2 cores with a
warm cache, so it is `slow`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _readme_example() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Use it with pydantic-ai", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "README.md's 'Use it with pydantic-ai' section must hold a python block"
    return block.group(1)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this checkout, as `pip wheel .` builds it (hatchling from PyPI)."""
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)], cwd=out)
    (built,) = out.glob("memory_plugin-*.whl")
    return built


def test_wheel_holds_only_memory_plugin_and_its_sql(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names if "/" in name}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"memory_plugin"}
    record = next(n for n in names if n.endswith(".dist-info/RECORD"))
    lines = zipfile.ZipFile(wheel).read(record).decode().splitlines()
    assert not [line for line in lines if line.startswith(("agents/", "workflows/"))]
    assert any(n.startswith("memory_plugin/_sql/migrations/") and n.endswith(".sql") for n in names)
    assert "memory_plugin/py.typed" in names
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    extras = set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.M))
    assert {"local", "api", "redis"} <= extras


def test_wheel_installs_beside_openai_agents_and_runs_the_readme_example(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "MEMORY_", "OPENAI_", "VIRTUAL_ENV"))}
    _run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel), "openai-agents"],
        cwd=tmp_path,
        env=env,
    )

    # `agents` is OpenAI's package: ours is not in the wheel to overwrite it.
    where = _run([str(python), "-c", "import agents; print(agents.__file__); print(agents.Runner.__name__)"],
                 cwd=tmp_path, env=env).split()  # fmt: skip
    assert where[0].startswith(str(venv)), where
    assert where[1] == "Runner"
    installed = _run([str(python), "-c", "import memory_plugin; print(memory_plugin.__file__)"], cwd=tmp_path, env=env)
    assert installed.strip().startswith(str(venv)), "memory_plugin must come from the installed wheel"

    # The README example, from a directory that is not the repository, on an embedded server migrated from the
    # wheel's SQL.
    work = tmp_path / "project"
    work.mkdir()
    (work / "example.py").write_text(_readme_example(), encoding="utf-8")
    run_env = env | {"MEMORY_DATA_DIR": str(tmp_path / "data"), "HF_HUB_OFFLINE": "1"}
    out = _run([str(python), "example.py"], cwd=work, env=run_env)
    assert "Anotado." in out
    # Session 1's preference was stored (in the schema the wheel's SQL created) and reached session 2's
    # context (its slots), with text search only: no `local` extra.
    assert re.search(r"'slots': [1-9]", out), out
    cli = str(venv / "bin" / "memory-plugin")
    url = _run([cli, "db-url"], cwd=work, env=run_env).strip()
    try:
        stored = _run(
            [str(python), "-c", "import psycopg, sys; print(psycopg.connect(sys.argv[1]).execute("
             "'select string_agg(content, chr(10)) from public.user_memory').fetchone()[0])", url],
            cwd=work, env=run_env,
        )  # fmt: skip
    finally:
        _run([cli, "stop"], cwd=work, env=run_env)
    assert "7075" in stored, stored
