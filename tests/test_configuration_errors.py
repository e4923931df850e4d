"""A `MEMORY_*` value that cannot be meant is refused when the settings are read, naming the variable and showing
a valid value: an empty path or URL, a JSON setting that is not JSON, a number that is not one. The error is the
plugin's (`ConfigurationError`) and still pydantic's `ValidationError`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from memory_plugin import MemorySettings
from memory_plugin.cli import app
from memory_plugin.errors import ConfigurationError, MemoryPluginError


@pytest.mark.parametrize(
    ("variable", "example"),
    [("MEMORY_DATA_DIR", "MEMORY_DATA_DIR=~/"), ("MEMORY_DATABASE_URL", "MEMORY_DATABASE_URL=postgresql://")],
)
def test_an_empty_path_or_url_is_refused_with_its_name_and_an_example(
    variable: str, example: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "  ")

    with pytest.raises(ConfigurationError) as info:
        MemorySettings()

    assert f"{variable} is empty" in str(info.value)
    assert example in str(info.value)
    assert isinstance(info.value, MemoryPluginError)
    assert isinstance(info.value, ValidationError)


def test_an_empty_data_dir_stops_the_cli_before_anything_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It used to create a 49 MB cluster in the current directory.
    monkeypatch.chdir(tmp_path)

    result = CliRunner().invoke(app, ["status"], env={"MEMORY_DATA_DIR": "", "MEMORY_DATABASE_URL": None})

    assert result.exit_code != 0
    assert "MEMORY_DATA_DIR is empty" in result.output
    assert os.listdir(tmp_path) == []


def test_a_json_setting_that_is_not_json_names_the_variable_and_shows_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_HALF_LIFE_DAYS", "preference=90")

    with pytest.raises(ConfigurationError) as info:
        MemorySettings()

    message = str(info.value)
    assert "MEMORY_HALF_LIFE_DAYS must be JSON" in message
    assert "MEMORY_HALF_LIFE_DAYS='{\"preference\": 180.0}'" in message  # an example that parses
    assert "'preference=90'" in message

    monkeypatch.setenv("MEMORY_HALF_LIFE_DAYS", '{"preference": 90}')
    assert MemorySettings().half_life_days["preference"] == 90


def test_a_malformed_number_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_POOL_MAX_SIZE", "ten")

    with pytest.raises(ConfigurationError, match=r"MEMORY_POOL_MAX_SIZE") as info:
        MemorySettings()

    assert "pool_max_size" in str(info.value)
    assert info.value.errors()[0]["input"] == "ten"
