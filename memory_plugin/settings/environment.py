"""`MEMORY_*` environment variables in, and errors that name them out.

Each variable keeps the flat name it had before the settings were grouped (`MEMORY_SEARCH_CANDIDATES` sets
`settings.search.candidates`), so `FlatEnvironment` reads the variables by flat name and hands pydantic-settings
nested values; `configuration_error` turns a validation error's nested places (`search.candidates`) back into the
variable a person can fix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from ..errors import ConfigurationError
from .flat import Flat

__all__ = ["FlatEnvironment", "configuration_error", "group_field"]

_JSON_KINDS = (dict, list, tuple, set, frozenset)
"""Field types whose environment value is JSON (`MEMORY_HALF_LIFE_DAYS='{"preference": 90}'`)."""


def group_field(settings_cls: type[BaseModel], flat: Flat[Any]) -> FieldInfo:
    """The group field a flat name stands for."""
    group = settings_cls.model_fields[flat.group].annotation
    if not (isinstance(group, type) and issubclass(group, BaseModel)):
        raise TypeError(f"{flat.name} names {flat.path}, but {flat.group} is not a settings group")
    return group.model_fields[flat.field]


class FlatEnvironment(PydanticBaseSettingsSource):
    """The `MEMORY_*` variables of every flat name, as the nested values of their groups (case-insensitive, as
    pydantic-settings reads variables); lists and objects are JSON."""

    def __init__(self, settings_cls: type[BaseSettings], names: Mapping[str, Flat[Any]]) -> None:
        super().__init__(settings_cls)
        self.names = names

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Not used: `__call__` reads every variable by its flat name."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        environ = {key.upper(): value for key, value in os.environ.items()}
        found: dict[str, dict[str, Any]] = {}
        for flat in self.names.values():
            variable = next((v for v in flat.variables if v.upper() in environ), None)
            if variable is not None:
                found.setdefault(flat.group, {})[flat.field] = self._decoded(flat, variable, environ[variable.upper()])
        return dict(found)

    def _decoded(self, flat: Flat[Any], variable: str, raw: str) -> Any:
        field = group_field(self.settings_cls, flat)
        if get_origin(field.annotation) not in _JSON_KINDS:
            return raw
        try:
            return json.loads(raw)
        except ValueError:
            raise _not_json(flat, variable, raw, field) from None


def _not_json(flat: Flat[Any], variable: str, raw: str, field: FieldInfo) -> ConfigurationError:
    """A `ConfigurationError` for a JSON setting whose environment value is not JSON, with an example."""
    default = field.get_default(call_default_factory=True)
    sample = dict(list(default.items())[:1]) if isinstance(default, dict) else list(default or [])[:1]
    message = f"{variable} must be JSON, e.g. {variable}='{json.dumps(sample)}'; got {raw!r}"
    return ConfigurationError.from_exception_data(
        "MemorySettings",
        [{"type": "value_error", "loc": (flat.name,), "input": raw, "ctx": {"error": ValueError(message)}}],
    )


def configuration_error(
    exc: ValidationError, settings_cls: type[BaseModel], names: Mapping[str, Flat[Any]]
) -> ConfigurationError:
    """The plugin's error for bad settings (still pydantic's `ValidationError`): every place is the flat name of
    its variable (`search.candidates` -> `search_candidates`), the title lists the variables, and no secret is
    echoed."""
    by_path = {(flat.group, flat.field): flat for flat in names.values()}
    errors: list[Any] = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        flat = by_path.get((str(loc[0]), str(loc[1]))) if len(loc) >= 2 else None
        if flat is not None:
            loc = (flat.name, *loc[2:])
        elif len(loc) == 1 and loc[0] in settings_cls.model_fields and error["type"] == "value_error":
            loc = ()  # a check across a group's fields: its message names the variables
        secret = (flat is None and not loc) or (flat is not None and _is_secret(settings_cls, flat))
        errors.append({**error, "loc": loc, **({"input": "(hidden)"} if secret else {})})
    variables = sorted({f"MEMORY_{e['loc'][0]}".upper() for e in errors if e["loc"] and e["loc"][0] in names})
    variables += ["MEMORY_ENCRYPTION_KEYS"] if any("MEMORY_ENCRYPTION_" in e["msg"] for e in errors) else []
    title = f"{exc.title} ({', '.join(variables)})" if variables else exc.title
    return ConfigurationError.from_exception_data(title, errors)


def _is_secret(settings_cls: type[BaseModel], flat: Flat[Any]) -> bool:
    # A secret field's input is the secret; a whole-model check's input is every value (URLs with passwords).
    return "SecretStr" in str(group_field(settings_cls, flat).annotation)
