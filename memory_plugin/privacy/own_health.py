"""The speaker's own clinical detail in conversation text, as spans to redact.

Verbatim notes (what a person wrote) talk about health in many ways that are not health data about the
speaker: a pandemic as a period ("since covid prices went up"), figures of speech ("the calories gave me a
heart attack"), other people ("my partner is pregnant!", "a writer who had liver cancer"), hypotheticals and
questions ("maybe you have arthritis?"). `find_own_clinical_spans` returns only the spans where the speaker
states their own diagnosis, medication or dose, or test result, in Spanish or English:

- a clinical term (the vocabulary of `health.py`: diagnoses, drugs and doses, lab values and verdicts);
- owned by the speaker: a first-person word ("I", "I'm", "my", "me"; "tengo", "tomo", "me diagnosticaron",
  "mi", "estoy", "di positivo"…) earlier in the same clause, with no other person between it and the term
  ("my partner is pregnant": "partner" stands between "my" and the term);
- in a statement: not in a question, and not after a hypothetical or speculative word in the same sentence
  ("if", "maybe", "might", "afraid", "si", "quizá", "a lo mejor", "ojalá"…);
- used clinically: covid counts only when caught or tested ("I had covid", "tengo covid", "covid positive"),
  never as a period or subject; "heart attack" / "infarto" not in the figures "gave me a heart attack",
  "almost had a heart attack", "casi me da un infarto"; "depression" not the economic one.

The span runs from the first-person word to the end of the clinical detail (with its type, dose or value), so
"turns out I'm covid positive so I cancelled the trip" keeps "turns out … so I cancelled the trip".
Matching runs on a length-preserving fold of the text (lower case, accents removed) so spans map back 1:1;
every pattern is a single linear scan or a bounded look-behind window (`_WINDOW` characters). The word lists
are laid out by first character (`patterns.by_first_char`) and the cues are scanned only in windows before
the clinical terms; each term then costs a few binary searches. Text dense in clinical words has every term
redacted without reading whose it is (`_DENSE_TERMS`): the privacy-first answer, in bounded time.
"""

from __future__ import annotations

import bisect
import re
import string
import unicodedata
from dataclasses import dataclass

from ..text import strip_marks
from .health import CLINICAL_TERM, CLINICAL_TERM_FEW_LETTERS, CLINICAL_TERM_KINDS, DOSE
from .patterns import by_first_char, split_alternatives

__all__ = ["ClinicalSpan", "SpanBounds", "find_own_clinical_spans", "fold_same_length", "own_clinical_span_bounds"]


@dataclass(frozen=True, slots=True)
class ClinicalSpan:
    """A stretch of text stating the speaker's own clinical detail."""

    start: int
    end: int
    kinds: tuple[str, ...]
    """What the span states, each once: "diagnosis", "medication", "test_result"."""


_COMBINING = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")


def fold_same_length(text: str) -> str:
    """Lower case without accents, one character per input character (so match positions map back 1:1)."""
    if text.isascii():
        return text.lower()
    # Whole-string NFKD without the combining marks keeps one character per character when the text holds no
    # combining mark of its own (none removed) and the length is unchanged (so none expanded: "ﬁ" -> "fi").
    if _COMBINING.search(text) is None:
        folded = _COMBINING.sub("", unicodedata.normalize("NFKD", text)).lower()
        if len(folded) == len(text):
            return folded
    return "".join(_fold_char(c) for c in text)


def _fold_char(char: str) -> str:
    """One character folded to one character: ASCII lower-cased; others without accents when that is one
    character, else lower-cased when that is one character, else as they are."""
    if char.isascii():
        return char.lower()
    decomposed = unicodedata.normalize("NFKD", char)
    base = strip_marks(decomposed).lower()
    lowered = char.lower()
    return base if len(base) == 1 else lowered if len(lowered) == 1 else char


def _words(alternation: str) -> str:
    """`alternation` as a non-capturing group, laid out for a fast scan (`patterns.by_first_char`)."""
    return by_first_char(split_alternatives(alternation))[0]


# How far back from a clinical term its owner may be (characters): "I have been taking metformin" is 25,
# "me diagnosticaron hace dos años una diabetes" 40.
_WINDOW = 60

# How far back in the sentence a hypothetical or speculative word still governs a term ("If I get covid" is 9;
# "I'm worried that after the trip I could end up with covid" is 50).
_HYPOTHETICAL_WINDOW = 100

# First-person words, matched on the folded text. Spanish "he" only as an auxiliary ("he tenido", "he dado"),
# so English "he" (third person) never counts.
_FIRST_PERSON_WORDS = (
    r"i|i'm|im|i've|ive|i'd|i'll|me|my|myself|mine"
    r"|yo|mi|mis|tengo|tuve|tomo|tome|padezco|padeci|sufro|sufri|estoy|estuve|llevo|sigo|soy|fui|di|mio|mia"
    r"|conmigo|pille|cogi|contagie|enferme|necesito|uso|use|empece|empiezo|voy|termine|pongo|pincho|inyecto|he\s+(?:sido|tenido|estado|dado|empezado|vuelto)|hice|empece|acabo"
)
_FIRST_PERSON = re.compile(r"(?<!\w)" + _words(_FIRST_PERSON_WORDS) + r"\b")
# Chat drops the subject: "Been battling depression since college", "Got diagnosed in May", "Had covid last
# week". A sentence starting with one of these verbs is the speaker's own statement.
_SUBJECTLESS_VERB = (
    r"(?:just\s+|still\s+|finally\s+)?(?P<verb>been|got|had|having|taking|took|started|tested"
    r"|caught|diagnosed|dealing|battling|fighting|living|recovering|struggling|suffering)\b"
)
# At the start of the text, and after a sentence mark: two patterns, so the second starts with a character class
# and the engine skips to the next mark instead of trying every position.
_SUBJECTLESS_AT_START = re.compile(_SUBJECTLESS_VERB)
_SUBJECTLESS = re.compile(r"[.!?\n]\s*+" + _SUBJECTLESS_VERB)
# "my"/"mi" own the term only when it follows within a few words with no verb between: "my type 2 diabetes",
# "my last HbA1c"; in "my bank account is in a deep depression" the account is the subject.
_POSSESSIVES = frozenset({"my", "mi", "mis"})
_POSSESSIVE_REACH_WORDS = 3
_VERB_BETWEEN = re.compile(r"\b(?:is|was|are|were|has|had|have|got|gets|es|era|esta|estaba|tiene|tenia|fue)\b")

# Someone or something else between the owner and the term: the detail is theirs ("my partner is pregnant",
# "I read about a writer who had liver cancer", "I saw a pill that cures cancer").
_OTHER_OWNER_WORDS = (
    r"he|she|they|his|her|hers|their|him|them|you|your|we|our|us|it|its|who|whose|whom|which|that|someone"
    r"|somebody|everyone|everybody|people|person|friends?|mom|mum|mother|dad|father|parents?|sister|brother"
    r"|siblings?|wife|husband|partner|boyfriend|girlfriend|fiance|fiancee|sons?|daughters?|kids?|child|children"
    r"|baby|grandma|grandpa|grand(?:mother|father|parents?)|aunt|uncle|cousin|niece|nephew|dogs?|cats?|pets?"
    r"|neighbou?rs?|boss|colleagues?|coworkers?|writer|author|actor|actress|singer|celebrity|patients?|family"
    r"|relatives?|teacher|students?|guy|girl|man|woman|lady|cure[sd]?|curing|research|awareness|charity"
    r"|fundraiser|foundation|documentary|article|news|campaign|study|book|movie|film|show|podcast|about"
    r"|ella|ellos|ellas|su|sus|le|les|tu|tus|usted|ustedes|nosotros|nosotras|nuestr[oa]s?|quien|alguien|amig[oa]s?"
    r"|madre|mama|padre|papa|padres|herman[oa]s?|mujer|marido|espos[oa]|pareja|novi[oa]|hij[oa]s?|abuel[oa]s?"
    r"|ti[oa]s?|prim[oa]s?|sobrin[oa]s?|perr[oa]s?|gat[oa]s?|vecin[oa]s?|jef[ea]|compañer[oa]s?|companer[oa]s?"
    r"|escritor[a]?|paciente?s?|familia|bebe|cura|investigacion|sobre|que|cual|contra|against|benefica|charity"
)
_OTHER_OWNER = re.compile(r"(?<!\w)" + _words(_OTHER_OWNER_WORDS) + r"\b")
# Hypotheticals and speculation anywhere earlier in the sentence. Spanish "si" is matched unaccented on the
# original text ("sí" is "yes").
_HYPOTHETICAL_WORDS = (
    r"if|what\s+if|in\s+case|maybe|perhaps|might|may\s+have|could\s+have|hope|hopefully|afraid|worried"
    r"|scared|fear|imagine|suppose|wonder|whether|unless|quiza|quizas|tal\s+vez|a\s+lo\s+mejor|puede\s+que"
    r"|ojala|por\s+si|imagina|supongamos|miedo|temo|preocupa|igual\s+tengo|no\s+se\s+si"
)
_HYPOTHETICAL = re.compile(r"(?<!\w)" + _words(_HYPOTHETICAL_WORDS) + r"\b")
# Written literal first, so the engine jumps between occurrences of "si" instead of trying every position.
_SPANISH_IF = re.compile(r"si\b(?<!\wsi)")
# Spanish "él" (he) is told from the article "el" only by its accent, so it is matched on the unfolded text.
_HE = re.compile(r"él\b(?<!\wél)")
# Covid is clinical only when caught or tested: "had/got/caught covid", "tengo/tuve covid", "covid positive".
_COVID_CAUGHT = re.compile(
    r"(?:\b(?:have|has|had|got|get|getting|caught|catch|contracted|tengo|tuve|tenido|pille|pillado"
    r"|(?:contagie|contagiado|contagiada|enferme|enfermo|enferma)\s+de)\s+(?:the\s+|el\s+|la\s+)?"
    # "got the flu and covid": one illness before it, joined by "and"/"y".
    r"(?:(?:the\s+|el\s+|la\s+)?\w+\s+(?:and|y)\s+)?)$"
)
_COVID_RESULT = re.compile(r"^\s*(?:positive|positivo|positiva|\+)")
_COVID_NOT_ILLNESS = re.compile(r"^\s*(?:vaccine|vaccin|shot|jab|booster|vacuna|times|era|pandemic|lockdown|test)")
# Figures of speech built on clinical words.
_FIGURATIVE = re.compile(
    r"(?:gave|give|gives|giving|nearly|almost|about\s+to\s+have|going\s+to\s+have|casi|me\s+va\s+a\s+dar"
    r"|me\s+van\s+a\s+dar|me\s+da)\s+(?:(?:me|had|have|having|got|tuve|me\s+da|me\s+dio)\s+)*(?:a\s+|un\s+)?"
    r"(?:mini[\s-]?)?$"
)
# A clinical word naming a cause or an institution: "cancer charity", "diabetes research", "covid rules".
_TOPIC_AFTER = re.compile(
    r"\s*-?(?:charity|charities|research|awareness|run|walk|fundraiser|foundation|society|association|benefit"
    r"|drive|month|day|week|campaign|ward|unit|clinic|center|centre|rules|restrictions|vaccine|vaccines|jab"
    r"|booster|shot|pandemic|era|times|lockdown|crisis|news|battery|batteries|ion|cells?)\b"
)
_ECONOMIC = re.compile(r"(?:economic|great|tropical|state\s+of|market|economica?|gran)\s+$")
_ECONOMIC_AFTER = re.compile(r"^\s*(?:economica|economic)")
_ZODIAC = re.compile(r"(?:\bi'?m\s+a|\bi\s+am\s+a|\bsoy|\bsigno|\bsign)\s+$")

# Sentence ends ("." not between digits: "7.2"), question and exclamation marks, new lines.
# One character class first, so the engine skips other characters without trying a match at each.
_SENTENCE_END = re.compile(r"[!?;\n¿¡.](?!(?<=\.)\d)")
# Clause boundaries besides sentence ends: the owner must be in the same clause as the term.
_CLAUSE_END = re.compile(r"[,:()\"\s](?:(?<=\s)(?:but|pero|although|aunque|while|mientras|whereas)\s|(?<!\s))")

# What follows a term and belongs to it: "diabetes tipo 1", "metformina 850 mg/día", "HbA1c 7,2 %".
# The first line is the rest of a value the term ends inside (a result pattern stops at "7" of "7.2 %").
_TRAILING_DETAIL = re.compile(
    r"\d*+(?:[.,]\d+)?+(?:/\d+)?+(?:\s?(?:%|mg/dl|mmol/l))?+"
    r"(?:\s+(?:de\s+)?(?:type|tipo)\s+(?:\d|i{1,2}|one|two|uno|dos)\b)?+"
    r"(?:\s+(?:positive|positivo|positiva|negative|negativo|negativa)\b)?+"
    r"(?:\s+(?:for|en|de|a|al|in|on)\s+(?:el\s+|la\s+|the\s+)?(?:covid(?:-?19)?|[a-z0-9]+(?=\s*$)))?+"
    r"(?:[\s:=]*(?:of\s+|de\s+|was\s+|is\s+|fue\s+|es\s+|at\s+|a\s+)?\d+(?:[.,]\d+)?"
    r"(?:\s?(?:%|mg/dl|mmol/l|mg|mcg|ml|units|unidades|ui)\b)?"
    r"(?:\s*(?:/|a\s+la|al|per|a|por)\s*(?:day|dia|d)\b)?)?+"
)


# Terms that introduce the condition rather than name it; the next word or two is the diagnosis itself.
_OBJECT_INTRODUCERS = ("diagnosed", "diagnosticado", "diagnosticada", " of", " de")
_NAMED_CONDITION = re.compile(
    r"(?:\s+(?:with|con|de))?\s+(?:(?:a|an|the|un|una|el|la)\s+)?[\w'-]+(?:\s+(?:type|tipo)\s+\w+)?"
)


_DOSE_UNIT_ENDS = ("mg", "cg", "µg", "ug")
_ASCII_LETTERS = string.ascii_letters.encode()


# A term as (start, end, kind): plain tuples, because text dense with clinical words makes one per word (1,000 in
# 20,000 characters) and a named tuple or dataclass costs ~0.5-1 µs more to build.
_Term = tuple[int, int, str]


def _clinical_terms(folded: str, original: str) -> list[_Term]:
    kinds = CLINICAL_TERM_KINDS
    # Both patterns find the same terms; the one starting with a letter set is faster when under half the
    # characters are ASCII letters (counted in C by deleting them from the bytes).
    encoded = folded.encode("utf-8", "surrogatepass")
    few_letters = 2 * (len(encoded) - len(encoded.translate(None, _ASCII_LETTERS))) < len(encoded)
    pattern = CLINICAL_TERM_FEW_LETTERS if few_letters else CLINICAL_TERM
    terms = [(*m.span(), kinds[m.lastindex - 1]) for m in pattern.finditer(folded)]  # type: ignore[operator]
    # Every dose holds one of these units' last two letters: text without them (a table of figures) skips the
    # scan.
    if any(unit in original for unit in _DOSE_UNIT_ENDS):
        terms += [(*m.span(), "medication") for m in DOSE.finditer(original)]
        # A clinical term starts with a letter and a dose with a digit, so no two terms share a start and the
        # tuples sort by start alone.
        terms.sort()
    return terms


def _used_clinically(folded: str, start: int, end: int) -> bool:
    """False for the figurative uses of clinical words, and for covid as a period or subject (the caller has
    ruled out a topic word right after the term, `_TOPIC_AFTER`)."""
    word = folded[start:end]
    if word not in _CHECKED_WORDS and not word.startswith("depres"):
        return True
    before = folded[max(0, start - 30) : start]
    after = folded[end : end + 20]
    if word in ("covid", "covid19"):
        if _COVID_NOT_ILLNESS.match(after):
            return False
        return _COVID_CAUGHT.search(before) is not None or _COVID_RESULT.match(after) is not None
    if word in ("heart attack", "infarto", "ictus") and _FIGURATIVE.search(before):
        return False
    if word.startswith("depres") and (_ECONOMIC.search(before) or _ECONOMIC_AFTER.match(after)):
        return False
    return not (word == "cancer" and _ZODIAC.search(before) and not after.lstrip().startswith(("surviv", "patient")))


# The words `_used_clinically` looks at more closely, besides "depres…": a term is "covid" or "covid19" (the
# term pattern's `covid\w*` stops before the dash of "covid-19"), never "covid-19" itself.
_CHECKED_WORDS = frozenset({"covid", "covid19", "heart attack", "infarto", "ictus", "cancer"})


def _lower_same_length(text: str) -> str:
    """`text` lower-cased one character per character, so its positions are those of `fold_same_length(text)`
    (`str.lower` turns "İ" into two characters and would shift every later cue)."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(low if len(low := char.lower()) == 1 else char for char in text)


def find_own_clinical_spans(text: str) -> list[ClinicalSpan]:
    """Spans of `text` where the speaker states their own diagnosis, medication/dose or test result (merged,
    in order). Empty for other people's health, public events, figures of speech, hypotheticals, questions."""
    return [ClinicalSpan(start, end, kinds) for start, end, kinds in own_clinical_span_bounds(text)]


SpanBounds = tuple[int, int, tuple[str, ...]]
"""A clinical span as (start, end, kinds), the fields of `ClinicalSpan`."""


# Each cue is looked for only near the terms: `_CUE_REACH` characters back (the furthest any check reads, the
# hypothetical window) within the term's sentence. A window's scan starts and ends `_PAD` characters further
# out (and beyond any run of whitespace there, which a cue's `\s+` may span), longer than any cue's other
# characters, so the matches inside it are those of a whole-text scan.
_CUE_REACH = max(_WINDOW, _HYPOTHETICAL_WINDOW)
_PAD = 32
_LONG_SPACE = re.compile(r"\s{8,}")
# Text this dense in clinical words (64 or more, one per 250 characters or closer: a pasted medical text, or
# input built to be slow) is not read word by word: every clinical term is redacted, with the few words between
# terms closer than `_DENSE_GAP`, the privacy-first answer where the rule does not look. Reading it costs up to
# ~10 ms per 20,000 characters; this ~3 (`python -m bench.privacy_filter`).
_DENSE_TERMS = 64
_DENSE_CHARS_PER_TERM = 250
_DENSE_GAP = 24

_Window = tuple[int, int]


def _windows(bounds: list[_Window]) -> list[_Window]:
    """`bounds` (low, high) in order of low, merged where their padded scans would overlap."""
    merged: list[_Window] = []
    for low, high in sorted(bounds):
        if merged and low - merged[-1][1] <= 2 * _PAD:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


_Scan = tuple[_Window, _Window]
"""A window, and the stretch scanned to find its matches."""


def _padded(windows: list[_Window], folded: str, runs: list[_Window]) -> list[_Scan]:
    """Each window with its stretch: widened by `_PAD`, and further across any run of whitespace (`runs`,
    in order) its edges fall in."""
    size = len(folded)
    starts = [start for start, _ in runs]

    def outward(position: int, step: int) -> int:
        while 0 < position < size:
            r = bisect.bisect_right(starts, position) - 1
            if r < 0 or not (runs[r][0] <= position <= runs[r][1]):
                break
            position = runs[r][0] - _PAD - 1 if step < 0 else runs[r][1] + _PAD + 1  # always leaves the run
        return min(max(position, 0), size)

    return [((low, high), (outward(low - _PAD, -1), outward(high + _PAD, 1))) for low, high in windows]


def _scan(pattern: re.Pattern[str], folded: str, scans: list[_Scan], group: int | str = 0) -> list[re.Match[str]]:
    """The matches of `pattern` whose `group` starts inside one of the windows, as a whole-text scan finds them."""
    found: list[re.Match[str]] = []
    for (low, high), (scan_from, scan_to) in scans:
        for match in pattern.finditer(folded, scan_from, scan_to):
            if low <= match.start(group) <= high:
                found.append(match)
    return found


def _every_term(folded: str, terms: list[_Term]) -> list[SpanBounds]:
    """Dense clinical text: every term, without reading who it belongs to; terms closer than `_DENSE_GAP` make
    one span, which ends with its last term's detail."""
    runs: list[tuple[int, int, int, tuple[str, ...]]] = []  # start, end of the last term, its start, kinds
    for start, end, kind in terms:
        if runs and start - runs[-1][1] <= _DENSE_GAP:
            run_start, _, _, kinds = runs[-1]
            runs[-1] = (run_start, max(end, runs[-1][1]), start, kinds if kind in kinds else (*kinds, kind))
        else:
            runs.append((start, end, start, (kind,)))
    # A detail may reach the next run: merged as the spans of the word-by-word reading are.
    return _merge([(start, _detail_end(folded, last, end), kinds) for start, end, last, kinds in runs])


def own_clinical_span_bounds(text: str) -> list[SpanBounds]:
    """`find_own_clinical_spans` as plain tuples: what the note filter needs, without building a dataclass per
    span (~0.7 µs each; text dense with clinical words holds hundreds).

    Each cue (sentence ends, clause ends, owners, other people, hypotheticals) is found in one scan of the
    windows before the terms; each term then costs a few binary searches, so the whole is O(n log n) however
    many terms. Text dense in clinical terms has every term redacted (`_DENSE_TERMS`)."""
    folded = fold_same_length(text)
    terms = _clinical_terms(folded, text)
    if not terms:
        return []
    if len(terms) >= _DENSE_TERMS and len(terms) * _DENSE_CHARS_PER_TERM >= len(folded):
        return _every_term(folded, terms)
    sentence_ends = [m.start() for m in _SENTENCE_END.finditer(folded)]
    # Where the checks read: from `_CUE_REACH` before each term (not before its sentence) to its start; other
    # people also from the previous term of the same sentence (a detail continuing the speaker's earlier one).
    cue_bounds: list[_Window] = []
    other_bounds: list[_Window] = []
    previous_end, previous_sentence = -1, -1
    for term_start, term_end, _kind in terms:
        k = bisect.bisect_left(sentence_ends, term_start)
        sentence_start = sentence_ends[k - 1] + 1 if k > 0 else 0
        low = max(sentence_start, term_start - _CUE_REACH)
        cue_bounds.append((low, term_end))
        other_bounds.append((min(low, previous_end) if previous_sentence == k else low, term_end))
        previous_end, previous_sentence = term_end, k
    spaces = [m.span() for m in _LONG_SPACE.finditer(folded)]
    cue_windows = _padded(_windows(cue_bounds), folded, spaces)
    other_windows = _padded(_windows(other_bounds), folded, spaces)
    lowered = _lower_same_length(text)
    clause_ends = sorted({m.end() for m in _scan(_CLAUSE_END, folded, cue_windows)} | {e + 1 for e in sentence_ends})
    owners = [m.span() for m in _scan(_FIRST_PERSON, folded, cue_windows)]
    # A subjectless verb at the start never contains a sentence mark, so no match after a mark overlaps it.
    first = _SUBJECTLESS_AT_START.match(folded)
    if first is not None:
        owners.append(first.span("verb"))
    owners += [m.span("verb") for m in _scan(_SUBJECTLESS, folded, cue_windows, "verb")]
    owners.sort()
    owner_starts = [start for start, _ in owners]
    owner_ends = [end for _, end in owners]
    others = [m.start() for m in _scan(_OTHER_OWNER, folded, other_windows)]
    if "él" in lowered:
        others += [m.start() for m in _scan(_HE, lowered, other_windows)]
        others.sort()
    hypotheticals = [m.start() for m in _scan(_HYPOTHETICAL, folded, cue_windows)]
    if "si" in lowered:
        hypotheticals += [m.start() for m in _scan(_SPANISH_IF, lowered, cue_windows)]
        hypotheticals.sort()
    spans: list[SpanBounds] = []
    bisect_left = bisect.bisect_left
    bisect_right = bisect.bisect_right
    sentence_count = len(sentence_ends)
    hypothetical_count = len(hypotheticals)
    other_count = len(others)
    topic_after = _TOPIC_AFTER.match
    # Cheap checks first (a few binary searches), the regex-backed ones last: every check only skips a term,
    # so their order does not change the result.
    for term_start, term_end, kind in terms:
        # The sentence holding the term: from the previous end mark to the next one.
        k = bisect_left(sentence_ends, term_start)
        if k < sentence_count and folded[sentence_ends[k]] == "?":
            continue
        if k > 0:
            sentence_start = sentence_ends[k - 1] + 1
            if folded[sentence_start - 1] == "¿":
                continue
        else:
            sentence_start = 0
        # A hypothetical marker further back than `_HYPOTHETICAL_WINDOW` does not govern the term.
        h = bisect_left(hypotheticals, max(sentence_start, term_start - _HYPOTHETICAL_WINDOW))
        if h < hypothetical_count and hypotheticals[h] < term_start:
            continue
        c = bisect_right(clause_ends, term_start)
        clause_start = max(clause_ends[c - 1] if c > 0 else 0, term_start - _WINDOW, sentence_start)
        o = bisect_right(owner_starts, term_start) - 1
        start = -1
        if o >= 0 and owner_starts[o] >= clause_start:
            owner_end = owner_ends[o]
            # Nobody else named between the owner and the term.
            x = bisect_left(others, owner_end)
            if x >= other_count or others[x] >= term_start:
                start = min(owner_starts[o], term_start)
                if folded[owner_starts[o] : owner_end] in _POSSESSIVES:
                    between = folded[owner_end:term_start]
                    if len(between.split()) > _POSSESSIVE_REACH_WORDS or _VERB_BETWEEN.search(between):
                        start = -1
        if start < 0:
            # A further term in a sentence whose earlier detail was the speaker's ("my A1C came back at 6.8,
            # still prediabetic") is theirs too, unless someone else is named in between.
            if not spans or spans[-1][1] < sentence_start:
                continue
            x = bisect_left(others, spans[-1][1])
            if x < other_count and others[x] < term_start:
                continue
            start = term_start
        # `endpos` reads the 20 characters after the term as the slice `folded[end:end + 20]` would.
        if topic_after(folded, term_end, term_end + 20) or not _used_clinically(folded, term_start, term_end):
            continue
        spans.append((start, _detail_end(folded, term_start, term_end), (kind,)))
    return _merge([(start, _clause_end(folded, end), kinds) for start, end, kinds in spans])


# Where a clause stating clinical detail ends: a sentence or clause mark, or a conjunction starting the next clause
# ("…, so I cancelled", "… y no puedo hacer turnos"). "because"/"porque"/"por" do not end it: what follows is
# the reason, often the condition itself ("tomo sertralina por ansiedad", "chemo next week for my lymphoma").
_CLAUSE_STOP = re.compile(
    r"[,;:()\n!?¿¡]|\.(?!\d)|\s(?:and|but|so|or|then|although|though|while|whereas|y|e|o|pero|asi|aunque|mientras"
    r"|luego|entonces)\b"
)
# A clause runs at most this far past its clinical term (characters): "next week for my lymphoma, " is 27; a long
# run-on without a mark is cut at the last space within reach, privacy first.
_CLAUSE_REACH = 120


def _clause_end(folded: str, end: int) -> int:
    """The end of the clause the clinical detail ending at `end` belongs to: the whole clause is the speaker's
    clinical statement (its object, reason, schedule), not the term alone."""
    limit = min(len(folded), end + _CLAUSE_REACH)
    stop = _CLAUSE_STOP.search(folded, end, limit)
    if stop is not None:
        return stop.start()
    if limit == len(folded):
        return len(folded.rstrip())
    space = folded.rfind(" ", end, limit)
    return space if space > end else end


def _detail_end(folded: str, start: int, end: int) -> int:
    """Where the clinical detail of the term at `start:end` ends: its type, dose, value, verdict, and the condition
    named after "diagnosed with" / "diagnosis of" / "diagnosticado de"."""
    if folded.endswith(_OBJECT_INTRODUCERS, start, end):
        named = _NAMED_CONDITION.match(folded, end)
        if named is not None:
            end = named.end()
    detail = _TRAILING_DETAIL.match(folded, end)
    return detail.end() if detail is not None else end


def _merge(spans: list[SpanBounds]) -> list[SpanBounds]:
    """Spans sorted and merged where they touch or overlap, each merged span with the kinds of its parts (each
    once, in order)."""
    spans.sort(key=lambda s: s[0])
    merged: list[SpanBounds] = []
    for start, end, kinds in spans:
        if merged and start <= merged[-1][1]:
            last_start, last_end, known = merged[-1]
            merged[-1] = (last_start, max(last_end, end), (*known, *(k for k in kinds if k not in known)))
        else:
            merged.append((start, end, kinds))
    return merged
