"""Near-duplicate facts: when a new fact is a rewording of a stored one, reinforce instead of inserting.

Two facts of the same user and category are near-duplicates when

1. their **match keys** (`match_key`: the content without case, accents or extra spaces) have a trigram
   similarity of at least the threshold (`MemorySettings.near_duplicate_threshold`, default 0.8), computed
   exactly as PostgreSQL's `pg_trgm.similarity` does (so the Postgres and in-memory stores agree),
2. their **guards** (`match_guard`) are equal: the same set of numbers and codes, of named values (weekdays,
   colours, and whatever the configured `Vocabulary` names), and both negated or both not. Trigrams alone
   would merge "aluminio 7075" with "aluminio 6061" (similarity 0.64) or "Prefiere aluminio 7075" with "No
   prefiere aluminio 7075" (0.89): a different number, part code or a negation is a different fact, never a
   paraphrase; and
3. no word was **swapped**: the content words of one (`match_words`: words other than articles,
   prepositions and the like, cut to their first 5 letters so "certificado"/"certificados" and
   "Monday"/"Mondays" count as one) are all among the other's. A rewording adds or drops words; a different
   fact swaps one: "Recibe entregas solo los viernes por la mañana" and "…los lunes…" score 0.81 on
   trigrams, which long sentences differing in one word easily reach.

The threshold was chosen on Spanish and English paraphrase pairs (tests/test_memory_quality.py): 0.8 merges
reworded facts that keep their words ("Prefiere el aluminio 7075", "Prefers a black anodized finish",
"Wants deliveries on Monday") and keeps apart one-word substitutions, the closest of which scored 0.73
("…anodized black finish" / "…anodized red finish"). Paraphrases with other words ("Le gusta el aluminio
7075", 0.40) are not caught here: embedding similarity (`semantic.py`) catches those.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache

from ..rows import MemoryItem, merge_items
from ..text import normalize_key
from .vocabulary import DEFAULT_VOCABULARY, Vocabulary

__all__ = [
    "NEGATION_WORDS",
    "STOP_WORDS",
    "fold_near_duplicates",
    "keys_of",
    "match_guard",
    "match_key",
    "match_words",
    "no_word_swapped",
    "trigram_similarity",
    "trigrams",
]

_WORD = re.compile(r"[^\W_]+")
NEGATION_WORDS = frozenset(
    {
        # Spanish
        "no", "nunca", "jamas", "ni", "tampoco", "sin", "ningun", "ninguno", "ninguna", "nada",
        # English (contractions lose their apostrophe: "don't" -> "don", "t"; see `_negated`)
        "not", "never", "without", "nor", "none", "nothing", "cannot", "dont", "doesnt", "didnt", "wont",
        "cant", "isnt", "arent", "wasnt", "shouldnt",
    }
)  # fmt: skip
"""Words that turn a statement into its opposite; a negated fact never merges with a plain one."""


STOP_WORDS = frozenset(
    {
        # Spanish
        "el", "la", "los", "las", "lo", "un", "una", "unos", "unas", "de", "del", "al", "a", "en", "para", "por",
        "con", "y", "e", "o", "u", "que", "se", "su", "sus", "le", "les", "me", "mi", "mis", "es", "son", "esta",
        "este", "estos", "estas", "muy", "mas", "todo", "todos", "toda", "todas", "siempre", "tambien",
        # English
        "the", "an", "of", "to", "in", "on", "for", "with", "and", "or", "is", "are", "be", "by", "at", "as",
        "from", "his", "her", "their", "its", "it", "this", "that", "these", "those", "very", "all", "always",
        "also", "every", "each",
    }
)  # fmt: skip
"""Words that add nothing to what a fact is about; a rewording may add or drop them freely."""

_STEM = 5
"""Content words are compared on their first letters, so inflections ("certificado"/"certificados") match."""


def _has_digit(word: str) -> bool:
    # Most words are letters only: one C-level check instead of a generator over their characters.
    return not word.isalpha() and any(c.isdigit() for c in word)


def match_key(content: str) -> str:
    """The text compared for near-duplicates: lower case, without accents, spaces collapsed."""
    return normalize_key(content)


def _negated(words: Sequence[str]) -> bool:
    if any(w in NEGATION_WORDS for w in words):
        return True
    # "don't", "doesn't", "won't", "can't": the apostrophe splits them into "...n" + "t".
    return any(w == "t" and i > 0 and words[i - 1].endswith("n") for i, w in enumerate(words))


def _proper_names(content: str, vocabulary: Vocabulary) -> set[str]:
    """Capitalised words after the first one ("Ana García", "Airbus", "ISO"), normalised, without the closed-set
    values (already in the guard) and words holding a digit (codes, idem)."""
    names: set[str] = set()
    for word in _WORD.findall(content)[1:]:
        if word[0].isupper() and not _has_digit(word):
            key = match_key(word)
            if vocabulary.value_of(key) is None:
                names.add(key)
    return names


def match_guard(content: str, vocabulary: Vocabulary = DEFAULT_VOCABULARY) -> str:
    """What two near-duplicates must share exactly: negation, the numbers/codes, the named values and the proper
    names, e.g. `"+|7075"`, `"+|@aluminium,@mon"`, `"+|^ana,^garcia"`.

    `+` or `-` (negated), then the sorted distinct words holding a digit ("7075", "m8", "316l", "9001"), the
    values named (`vocabulary.values`, as `@value`: "los lunes" never merges with "los viernes", however
    similar the rest, while "anodizado negro" and "black anodizing" share their value) and the capitalised
    words after the first (as `^name`): two contacts, companies or standards are different facts however
    alike the rest ("Contacto de compras: Ana García" / "…: Luis Pérez" score 0.84 with MiniLM).
    """
    words = _WORD.findall(match_key(content))
    codes = {w for w in words if _has_digit(w)}
    codes.update("@" + v for v in map(vocabulary.value_of, words) if v is not None)
    codes.update("^" + name for name in _proper_names(content, vocabulary))
    return ("-" if _negated(words) else "+") + "|" + ",".join(sorted(codes))


def match_words(content: str) -> tuple[str, ...]:
    """The content words of a fact, stemmed to their first letters, sorted and distinct (see the module
    docstring, rule 3). Numbers and negations are left to `match_guard`."""
    words = _WORD.findall(match_key(content))
    return tuple(
        sorted(
            {
                w[:_STEM]
                for w in words
                if w not in STOP_WORDS and w not in NEGATION_WORDS and not _has_digit(w) and len(w) > 1
            }
        )
    )


def no_word_swapped(a_words: Sequence[str], b_words: Sequence[str]) -> bool:
    """Whether one fact's content words are all among the other's (words added or dropped, none swapped)."""
    a, b = set(a_words), set(b_words)
    return a <= b or b <= a


@lru_cache(maxsize=16_384)
def trigrams(key: str) -> frozenset[str]:
    """`pg_trgm`'s trigrams of an already lower-cased text: each word (a run of letters and digits) padded
    with two spaces before and one after, every 3 consecutive characters, as a set."""
    out: set[str] = set()
    for word in _WORD.findall(key):
        padded = f"  {word} "
        out.update(padded[i : i + 3] for i in range(len(padded) - 2))
    return frozenset(out)


def trigram_similarity(a: str, b: str) -> float:
    """`pg_trgm.similarity(a, b)` for match keys: shared trigrams / all distinct trigrams of both (0 if none).

    Computed in float32 like `pg_trgm` (which returns `real`), so both stores compare equal values with the
    threshold."""
    ta, tb = trigrams(a), trigrams(b)
    if not ta or not tb:
        return 0.0
    common = len(ta & tb)
    return _float4(common / (len(ta) + len(tb) - common))


def _float4(value: float) -> float:
    import struct

    packed: float = struct.unpack("f", struct.pack("f", value))[0]
    return packed


def is_near_duplicate(a: tuple[str, str, Sequence[str]], b: tuple[str, str, Sequence[str]], threshold: float) -> bool:
    """Whether two facts of the same category, given as (match_key, match_guard, match_words), are
    near-duplicates (see the module docstring)."""
    return a[1] == b[1] and no_word_swapped(a[2], b[2]) and trigram_similarity(a[0], b[0]) >= _float4(threshold)


def keys_of(content: str, vocabulary: Vocabulary) -> tuple[str, str, tuple[str, ...]]:
    """(match_key, match_guard, match_words) of a fact's content, the guard in the store's `vocabulary` (as the
    write path computes it: another vocabulary gives other guards)."""
    return match_key(content), match_guard(content, vocabulary), match_words(content)


def fold_near_duplicates(items: Sequence[MemoryItem], threshold: float) -> tuple[list[MemoryItem], int]:
    """Within one write, fold each fact into an earlier near-duplicate fact of the same category (the
    earlier wording stays; confidence and importance take the max, provenance accumulates). Returns the
    items left and how many were folded. Threshold above 1 turns folding off.

    Only facts with the same category and guard are compared, so the pairwise comparison runs inside small
    groups (a batch of 1,000 facts with different numbers compares nothing).
    """

    def group_of(item: MemoryItem) -> tuple[str, ...] | None:
        if item.kind != "fact" or item.match_key is None or item.match_guard is None or item.match_words is None:
            return None
        return (item.category, item.match_guard)

    def similarity(earlier: MemoryItem, item: MemoryItem) -> float | None:
        assert earlier.match_key is not None
        assert item.match_key is not None
        assert earlier.match_words is not None
        assert item.match_words is not None
        if not no_word_swapped(earlier.match_words, item.match_words):
            return None
        return trigram_similarity(earlier.match_key, item.match_key)

    return fold_similar(items, group_of, similarity, _float4(threshold))


def fold_similar(
    items: Sequence[MemoryItem],
    group_of: Callable[[MemoryItem], tuple[str, ...] | None],
    similarity: Callable[[MemoryItem, MemoryItem], float | None],
    threshold: float,
) -> tuple[list[MemoryItem], int]:
    """Fold each item into the most similar earlier item of its group (`similarity` at least `threshold`; None:
    never), keeping the earlier wording (`merge_items`). Items whose group is None are kept as they are.
    Returns the items left and how many were folded; a threshold above 1 folds nothing. Shared by the trigram
    and the embedding rules, which differ only in their groups and their similarity."""

    if threshold > 1:
        return list(items), 0
    kept: list[MemoryItem] = []
    groups: dict[tuple[str, ...], list[int]] = {}
    folded = 0
    for item in items:
        key = group_of(item)
        if key is None:
            kept.append(item)
            continue
        group = groups.setdefault(key, [])
        best: tuple[float, int] | None = None
        for index in group:
            score = similarity(kept[index], item)
            if score is not None and score >= threshold and (best is None or score > best[0]):
                best = (score, index)
        if best is None:
            group.append(len(kept))
            kept.append(item)
        else:
            kept[best[1]] = merge_items(kept[best[1]], item)
            folded += 1
    return kept, folded
