"""Memory quality: the rules that keep long-term memory small, true and current.

- `matching.py`: near-duplicate detection (trigram similarity, as `pg_trgm` computes it, plus a guard on
  numbers and negation) so a paraphrase reinforces the stored fact instead of adding a row;
- `semantic.py`: near-duplicates by embedding similarity (same model, same guard), for paraphrases with
  other words;
- `slots.py`: slot-like facts (a budget, a delivery lead time, the stance on one material), where a new
  value supersedes the old one and the old one is kept as history;
- `decay.py`: confidence decays with time since the fact was last stated (half-life per category);
- `outcome.py`: what a write did (inserted, reinforced, merged as a near-duplicate, superseded).

The same rules run in SQL (`supabase/schemas/20_memory_write.sql`) for the Postgres and
Supabase stores; Python computes the per-fact keys once (`MemoryItem.match_key`, `match_guard`, `slot`) so
both sides agree, and `InMemoryStore` applies the rules with the functions here.
"""

from .decay import DEFAULT_HALF_LIFE_DAYS, DecayPolicy, decayed_confidence
from .matching import fold_near_duplicates, match_guard, match_key, trigram_similarity
from .outcome import WriteOutcome
from .semantic import DEFAULT_EMBEDDING_THRESHOLD, cosine_similarity, fold_semantic_duplicates
from .slots import detect_slot

__all__ = [
    "DEFAULT_EMBEDDING_THRESHOLD",
    "DEFAULT_HALF_LIFE_DAYS",
    "DecayPolicy",
    "WriteOutcome",
    "cosine_similarity",
    "decayed_confidence",
    "detect_slot",
    "fold_near_duplicates",
    "fold_semantic_duplicates",
    "match_guard",
    "match_key",
    "trigram_similarity",
]
