"""What every settings group is made of: `SettingsGroup`, a frozen pydantic model of one concern, and `Flat`, the
flat name of one of its fields (`settings.search_candidates` reads `settings.search.candidates`, and
`MEMORY_SEARCH_CANDIDATES` sets it).

The groups are the API (`settings.search.candidates`); the flat names are the environment variables' names and
keep every `MemorySettings(search_candidates=…)`, `model_copy(update={"search_candidates": …})` and
`settings.search_candidates` written before the groups working.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from pydantic import BaseModel, ConfigDict

__all__ = ["Flat", "SettingsGroup", "as_values", "flat_names", "routed"]

T = TypeVar("T")


class SettingsGroup(BaseModel):
    """The settings of one concern, a field of `MemorySettings` (`settings.search`, `settings.sessions`…).

    Frozen like the settings. A group built alone takes its own field names (`SearchSettings(candidates=50)`)
    and reads no environment variable: `MemorySettings` reads them, by their flat names."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Flat(property, Generic[T]):
    """The flat name of one group field, declared as `search_candidates = Flat[int]("search.candidates")`.

    The name is read as `settings.search_candidates`, passed as `MemorySettings(search_candidates=…)` or
    `model_copy(update={"search_candidates": …})`, and read from `MEMORY_SEARCH_CANDIDATES` (then from each of
    `also_env`); `env=False` for a value only code can give. A read-only property whose getter is an
    `operator.attrgetter`: no Python frame per read (~70 ns, a read by group ~50 ns, a Python `__get__` ~140 ns),
    for the hot paths that still read flat names (`add_message` reads one per message)."""

    def __init__(self, path: str, *, env: bool = True, also_env: tuple[str, ...] = ()) -> None:
        super().__init__(attrgetter(path), doc=f"`settings.{path}` by its flat name (kept for compatibility).")
        self.group, _, self.field = path.partition(".")
        self.name = ""
        self.variables: tuple[str, ...] = ()
        self._env = env
        self._also_env = also_env

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name
        self.variables = (f"MEMORY_{name.upper()}", *self._also_env) if self._env else ()

    @property
    def path(self) -> str:
        """Where the value lives: `"search.candidates"`."""
        return f"{self.group}.{self.field}"

    if TYPE_CHECKING:  # the types of a read; at run time property's own (C) `__get__` calls the attrgetter

        @overload
        def __get__(self, instance: None, owner: type[Any] | None = None, /) -> Flat[T]: ...

        @overload
        def __get__(self, instance: object, owner: type[Any] | None = None, /) -> T: ...

        def __get__(self, instance: object | None, owner: type[Any] | None = None, /) -> T | Flat[T]: ...


def flat_names(cls: type[Any]) -> dict[str, Flat[Any]]:
    """Every flat name `cls` and its bases declare, by name, in the order of the bases (the nearest declaration
    of a name wins, as attribute lookup does)."""
    names: dict[str, Flat[Any]] = {}
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            if isinstance(value, Flat):
                names.setdefault(name, value)
    return names


def as_values(group: object) -> dict[str, Any]:
    """A group's values as a dict (a group model or a dict of its fields), to lay flat values on top of."""
    if isinstance(group, SettingsGroup):
        return {name: getattr(group, name) for name in type(group).model_fields}
    return dict(group) if isinstance(group, Mapping) else {}


def routed(values: Mapping[str, Any], names: Mapping[str, Flat[Any]]) -> dict[str, Any]:
    """`values` with every flat name moved into its group: `{"search_candidates": 5}` -> `{"search":
    {"candidates": 5}}`. A group also given whole (a model or a dict) keeps its values under the flat ones."""
    result: dict[str, Any] = {key: value for key, value in values.items() if key not in names}
    for key, value in values.items():
        flat = names.get(key)
        if flat is not None:
            result[flat.group] = {**as_values(result.get(flat.group, {})), flat.field: value}
    return result
