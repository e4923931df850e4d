"""Every ```python block of README.md and docs/*.md runs as written, and the reference tables stay complete.

Each block is a whole script: it runs in a fresh interpreter with the project on PYTHONPATH, pointed at the
test database (`MEMORY_DATABASE_URL`) and a temporary data directory, offline (no OpenAI key, so examples
that would use a real model take their TestModel/FunctionModel branch). A block that cannot run here (it
needs a service the tests do not have) starts with a `# not run: <why>` line: it is still compiled, and such
blocks stay rare.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from memory_plugin.cli import app
from memory_plugin.settings import MemorySettings

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = "# not run:"
MAX_NOT_RUN = 2
"""Blocks that only compile: a guide whose examples do not run is a guide nobody can trust."""

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Example:
    """One fenced python block: where it is and its code (dedented as it sits in a list, if it does)."""

    path: Path
    line: int
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return not self.code.lstrip().startswith(NOT_RUN)


def _examples() -> list[Example]:
    found: list[Example] = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            if match.group("info").strip().split(" ")[0] not in {"python", "py"}:
                continue
            indent = match.group("indent")
            lines = match.group("body").splitlines()
            code = "\n".join(line.removeprefix(indent) for line in lines) + "\n"
            found.append(Example(path, text.count("\n", 0, match.start()) + 1, code))
    return found


EXAMPLES = _examples()


def test_the_guide_and_the_design_notes_have_examples() -> None:
    # Guards the extraction itself: a fence the regex stopped seeing would make every other test vacuous.
    readme = [e for e in EXAMPLES if e.path.name == "README.md" and e.runs]
    assert len(readme) >= 2, [e.where for e in EXAMPLES]
    assert any(e.path.parent.name == "docs" and e.runs for e in EXAMPLES)


def test_every_example_compiles() -> None:
    for example in EXAMPLES:
        compile(example.code, example.where, "exec")


def test_examples_that_do_not_run_are_rare_and_say_why() -> None:
    skipped = [e for e in EXAMPLES if not e.runs]
    assert len(skipped) <= MAX_NOT_RUN, [e.where for e in skipped]
    for example in skipped:
        reason = example.code.lstrip().splitlines()[0].removeprefix(NOT_RUN).strip()
        assert len(reason) > 10, f"{example.where}: say why the block cannot run"


@pytest.fixture(scope="module")
def example_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data directory for all examples: the ONNX graph of the offline model is exported once."""
    return tmp_path_factory.mktemp("docs-examples")


@pytest.mark.slow
@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.runs], ids=lambda e: e.where)
def test_example_runs_as_written(example: Example, database_url: str, example_data_dir: Path) -> None:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("MEMORY_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_", "GROQ_", "MISTRAL_"))
        and name != "REQUIRE_PG_MEMORY"
    }
    env |= {
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "MEMORY_DATABASE_URL": database_url,
        "MEMORY_DATA_DIR": str(example_data_dir),
    }
    script = example_data_dir / f"example_{example.path.stem}_{example.line}.py"
    script.write_text(example.code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=example_data_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{example.where} failed:\n{done.stdout}\n{done.stderr}"


def test_every_setting_is_in_the_configuration_reference() -> None:
    reference = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    missing = [
        f"MEMORY_{name.upper()}" for name in MemorySettings.flat_names() if f"MEMORY_{name.upper()}" not in reference
    ]
    assert not missing, f"docs/configuration.md does not describe {missing}"


def test_every_command_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    names = [c.name or (c.callback.__name__.replace("_", "-") if c.callback else "") for c in app.registered_commands]
    assert len(names) >= 8, names
    missing = [name for name in names if f"`memory-plugin {name}" not in readme]
    assert not missing, f"README.md's command table does not list {missing}"
