"""Encryption at rest of sensitive facts (`settings.encryption`; docs/privacy.md: "Sensitive facts, sealed")."""

from __future__ import annotations

from pydantic import SecretStr, field_validator, model_validator

from ..crypto.keys import KEY_EXAMPLE, KeyRing, parse_key_ring
from ..quality.decay import DEFAULT_HALF_LIFE_DAYS
from .flat import Flat, SettingsGroup

__all__ = ["EncryptionNames", "EncryptionSettings"]


class EncryptionSettings(SettingsGroup):
    """The keys that seal sensitive facts at rest, and which facts are sensitive (`settings.encryption`)."""

    keys: SecretStr | None = None
    """AES-GCM keys that seal sensitive facts, as comma-separated `id:base64` pairs (16, 24 or 32 bytes each):
    `MEMORY_ENCRYPTION_KEYS=k1:$(openssl rand -base64 32)`. Unset: nothing is sealed, and a write marked
    `sensitive=True` is refused (`EncryptionKeyError`). Keep an old key listed until `memory-plugin rotate-key`
    has re-sealed its rows. Needs the `crypto` extra (`cryptography`)."""

    active_key: str | None = None
    """The id among `encryption_keys` new writes and `rotate-key` seal with; unset: the first pair listed."""

    hash_key: SecretStr | None = None
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
        unknown = sorted(set(value) - set(DEFAULT_HALF_LIFE_DAYS))
        if unknown:
            raise ValueError(
                f"MEMORY_SENSITIVE_CATEGORIES names unknown fact categories {unknown}; known:"
                f" {sorted(DEFAULT_HALF_LIFE_DAYS)}, e.g. MEMORY_SENSITIVE_CATEGORIES='[\"health_note\"]'"
            )
        return value

    @model_validator(mode="after")
    def _readable_key_ring(self) -> EncryptionSettings:
        self.key_ring()  # a malformed key fails at start, naming its variable, not at the first sensitive write
        return self

    def key_ring(self) -> KeyRing | None:
        """The parsed encryption keys (None: encryption is off); ValueError names a malformed variable."""
        if self.keys is None:
            if self.active_key or self.hash_key is not None:
                raise ValueError(
                    "MEMORY_ENCRYPTION_ACTIVE_KEY or MEMORY_ENCRYPTION_HASH_KEY is set without"
                    f" MEMORY_ENCRYPTION_KEYS; set the keys too, e.g. {KEY_EXAMPLE}"
                )
            return None
        hash_key = self.hash_key.get_secret_value() if self.hash_key is not None else None
        return parse_key_ring(self.keys.get_secret_value(), self.active_key, hash_key)


class EncryptionNames:
    """The flat names (and `MEMORY_*` variables) of `EncryptionSettings`' fields."""

    encryption_keys = Flat[SecretStr | None]("encryption.keys")
    encryption_active_key = Flat[str | None]("encryption.active_key")
    encryption_hash_key = Flat[SecretStr | None]("encryption.hash_key")
    sensitive_categories = Flat[tuple[str, ...]]("encryption.sensitive_categories")
