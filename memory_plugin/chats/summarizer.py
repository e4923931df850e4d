"""Summaries and titles of chats: a pydantic-ai agent, with an offline extractive fallback.

`ExtractiveSummarizer` needs no model: it keeps the sentences whose words recur most in the conversation
(a previous summary counts double: it stands for many turns). `AgentSummarizer` asks a model and falls back
to the extractive one when the model fails, so a provider outage never blocks an append.
"""

from __future__ import annotations

import asyncio
import logging
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from pydantic_ai import Agent
from pydantic_ai.models import Model

__all__ = ["AgentSummarizer", "ChatSummarizer", "ExtractiveSummarizer", "key_terms"]

logger = logging.getLogger("memory_plugin")

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[^\W\d_]{4,}")
# Words too common in chats to say what one is about (Spanish and English; 4+ letters only reach here).
_STOPWORDS = frozenset(
    [
        "user",
        "assistant",
        "summary",
        "tool",
        "calls",
        "that",
        "this",
        "with",
        "have",
        "from",
        "what",
        "when",
        "where",
        "which",
        "would",
        "could",
        "should",
        "there",
        "their",
        "about",
        "para",
        "como",
        "pero",
        "porque",
        "cuando",
        "donde",
        "esta",
        "este",
        "esto",
        "estos",
        "estas",
        "tiene",
        "tengo",
        "quiero",
        "puedes",
        "hola",
        "gracias",
        "sobre",
        "entre",
        "desde",
        "hasta",
        "tambien",
        "muy",
        "mas",
        "solo",
        "todo",
        "todos",
        "otra",
        "otro",
        "necesito",
        "hacer",
        "favor",
        "vale",
        "bueno",
        "claro",
        "chat",
    ]
)


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore").decode()


def key_terms(text: str, limit: int = 5) -> list[str]:
    """The `limit` most frequent content words of `text` (accents folded), most frequent first."""
    counts = Counter(w for w in _WORD.findall(_fold(text)) if w not in _STOPWORDS)
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]


class ChatSummarizer(Protocol):
    """Writes a chat's summary and title."""

    async def summarize(self, lines: Sequence[str], max_chars: int) -> str:
        """A summary of the conversation `lines` ("user: …", "assistant: …", "summary: …") in ≤ `max_chars`."""
        ...

    async def title(self, summary: str, max_chars: int) -> str:
        """A short title for a chat with this summary."""
        ...


class ExtractiveSummarizer:
    """Offline summaries: the sentences with the most frequent content words, in conversation order."""

    async def summarize(self, lines: Sequence[str], max_chars: int) -> str:
        """The top sentences by content-word frequency, kept in order, within `max_chars`."""
        sentences: list[str] = []
        weights = Counter[str]()
        for line in lines:
            speaker, _, body = line.partition(": ")
            factor = 2 if speaker == "summary" else 1
            for sentence in _SENTENCE.split(body if body else line):
                sentence = sentence.strip()
                if len(sentence) < 3:
                    continue
                sentences.append(sentence)
                for word in _WORD.findall(_fold(sentence)):
                    if word not in _STOPWORDS:
                        weights[word] += factor

        def score(sentence: str) -> float:
            words = [w for w in _WORD.findall(_fold(sentence)) if w not in _STOPWORDS]
            # Only recurring words count: a one-off remark ("what's the weather?") is not what the chat is about.
            return sum(weights[w] for w in words if weights[w] >= 2) / (len(words) + 2) if words else 0.0

        scores = [score(sentence) for sentence in sentences]  # once each: the sort and the loop both read them
        ranked = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
        chosen: list[int] = []
        length = 0
        seen: set[str] = set()
        for i in ranked:
            sentence = sentences[i]
            if sentence in seen or length + len(sentence) + 1 > max_chars:
                continue
            if chosen and scores[i] <= 0:
                break
            chosen.append(i)
            seen.add(sentence)
            length += len(sentence) + 1
        return " ".join(sentences[i] for i in sorted(chosen))[:max_chars]

    async def title(self, summary: str, max_chars: int) -> str:
        """The summary's key terms, capitalised ("Soportes anodizados, aluminio")."""
        terms = key_terms(summary, 3)
        if not terms:
            return summary[:max_chars].strip()
        text = ", ".join(terms)
        return (text[:1].upper() + text[1:])[:max_chars]


_SUMMARY_PROMPT = (
    "Summarise this conversation for the assistant that continues it: the topic, the facts, decisions,"
    " numbers and open questions, in the conversation's language. At most {max_chars} characters, no preamble."
)
_TITLE_PROMPT = (
    "Write a title of at most 6 words, in the summary's language, for a chat with this summary. Only the title."
)


class AgentSummarizer:
    """Summaries and titles by a pydantic-ai model; the extractive summarizer when the model fails.

    Args:
        model: The model (a name like "openai:gpt-4o-mini", or a `Model`: `FunctionModel` in tests).
        timeout: Seconds a call may take before the fallback answers instead.
    """

    def __init__(self, model: Model | str, *, timeout: float = 30.0) -> None:
        self._agent: Agent[None, str] = Agent(model, output_type=str)
        self._timeout = timeout
        self._fallback = ExtractiveSummarizer()
        self.fallbacks = 0
        """Calls answered by the extractive fallback."""

    async def _ask(self, instructions: str, prompt: str) -> str | None:
        try:
            result = await asyncio.wait_for(self._agent.run(prompt, instructions=instructions), self._timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any provider failure: the offline summary answers instead
            logger.warning("chat summarizer model failed, using the extractive summary: %r", exc)
            self.fallbacks += 1
            return None
        text = result.output.strip()
        return text or None

    async def summarize(self, lines: Sequence[str], max_chars: int) -> str:
        """The model's summary, or the extractive one."""
        text = await self._ask(_SUMMARY_PROMPT.format(max_chars=max_chars), "\n".join(lines))
        if text is None:
            return await self._fallback.summarize(lines, max_chars)
        return text[:max_chars]

    async def title(self, summary: str, max_chars: int) -> str:
        """The model's title, or the summary's key terms."""
        text = await self._ask(_TITLE_PROMPT, summary)
        if text is None:
            return await self._fallback.title(summary, max_chars)
        return text.strip().strip('"')[:max_chars]
