"""Relative dates → absolute dates, against the time a message was written. Spanish and English, no model.

A fact is read back for months, so "next Friday" must be stored as the Friday it meant when it was said:

>>> from datetime import datetime, UTC
>>> resolve_relative_dates("Viaja el próximo viernes", datetime(2026, 11, 23, 10, tzinfo=UTC)).text
'Viaja el viernes 2026-11-27'

The rules, so that anyone can predict the result (the week starts on Monday, ISO 8601; the date is taken in
the reference time's own timezone, so pass a timestamp in the user's zone when it matters):

- hoy / today, mañana / tomorrow, pasado mañana / the day after tomorrow, ayer / yesterday,
  anteayer / the day before yesterday. "por la mañana", "las mañanas", "esta mañana" (the morning) and
  "hoy en día" (nowadays) are not dates.
- el próximo viernes, el viernes que viene / next Friday, this coming Friday: the first Friday strictly after
  the reference day. este viernes / this Friday: the first Friday on or after it. el viernes pasado /
  last Friday: the last Friday strictly before it. A bare weekday ("el viernes", "los viernes", "on Fridays")
  is not resolved: it is often a routine.
- esta semana, la semana que viene / la próxima semana, la semana pasada (this/next/last week): the Monday to
  Sunday week, written "la semana del <monday>" / "the week of <monday>".
- este fin de semana / this weekend: the Saturday and Sunday of the reference week (on a Sunday, that Sunday
  and the day before). el próximo fin de semana, el fin de semana que viene / next weekend: the first
  weekend that starts after the reference day. el fin de semana pasado / last weekend: the one before this
  week's. Written "el fin de semana del <saturday>" / "the weekend of <saturday>".
- este mes, el mes que viene / el próximo mes, el mes pasado (this/next/last month): "diciembre de 2026" /
  "December 2026".
- dentro de N días|semanas|meses / in N days|weeks|months, and hace N … / N … ago (N in digits or words
  up to twenty, "un par de" / "a couple of" = 2): the day that far away ("hacia el" / "around" for weeks and
  months). "en 3 días" (a lead time as often as a date) is left alone.

`DateResolution.expires_at` turns the result into an expiry for temporary facts: a statement that mentions
only dates that have not passed yet ("viaja el fin de semana del 2026-11-28") stops being useful once the
last of them is over.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

__all__ = ["DateResolution", "DateSpan", "resolve_relative_dates"]


@dataclass(frozen=True, slots=True)
class DateSpan:
    """One date mentioned in a text, as the days it covers."""

    phrase: str
    """The words as written ("el próximo viernes"), or the absolute date found ("2026-11-27")."""
    start: date
    """First day covered."""
    end: date
    """Last day covered (inclusive): the same as `start` for a single day."""


@dataclass(frozen=True, slots=True)
class DateResolution:
    """The result of `resolve_relative_dates`."""

    text: str
    """The input with every relative date replaced by an absolute one."""
    resolved: tuple[DateSpan, ...]
    """The relative dates that were replaced, in text order."""
    spans: tuple[DateSpan, ...]
    """Every date the resolved text mentions: the replaced ones plus absolute dates already written."""

    @property
    def changed(self) -> bool:
        """Whether any relative date was replaced."""
        return bool(self.resolved)

    def expires_at(self, reference: datetime) -> datetime | None:
        """When a statement pinned to these dates stops being useful: midnight after the last day, if every
        date mentioned is today or later (in `reference`'s timezone); None when it mentions no date or a past
        one (a past date is history — "the delivery of last week was late" — and does not expire)."""
        if not self.spans:
            return None
        today = reference.date()
        if any(span.end < today for span in self.spans):
            return None
        last = max(span.end for span in self.spans)
        return datetime.combine(last + timedelta(days=1), time(0), tzinfo=reference.tzinfo)


# --- vocabulary -------------------------------------------------------------------------------------------------
_ES_WEEKDAYS = ("lunes", "martes", "miércoles", "jueves", "viernes", "sábado", "domingo")
_EN_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_ES_MONTHS = (
    "enero", "febrero", "marzo", "abril", "mayo", "junio",
    "julio", "agosto", "septiembre", "octubre", "noviembre", "diciembre",
)  # fmt: skip
_EN_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip

_ES_WEEKDAY = r"(?P<wd>lunes|martes|mi[ée]rcoles|jueves|viernes|s[áa]bado|domingo)"
_EN_WEEKDAY = r"(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_ES_NUMBERS = {
    "un": 1, "una": 1, "uno": 1, "dos": 2, "tres": 3, "cuatro": 4, "cinco": 5, "seis": 6, "siete": 7, "ocho": 8,
    "nueve": 9, "diez": 10, "once": 11, "doce": 12, "quince": 15, "veinte": 20, "un par de": 2,
}  # fmt: skip
_EN_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "a couple of": 2,
}  # fmt: skip
_ES_COUNT = r"(?P<n>\d{1,3}|un\s+par\s+de|" + "|".join(k for k in _ES_NUMBERS if " " not in k) + r")"
_EN_COUNT = r"(?P<n>\d{1,3}|a\s+couple\s+of|" + "|".join(k for k in _EN_NUMBERS if " " not in k) + r")"
# English prepositions after which "on <date>" / "in <month>" would read twice ("by on Friday").
_EN_PREPOSITION = re.compile(r"\b(?:on|by|until|till|before|after|from|since|for|in|of|to|through)\s*$", re.I)
# "la mañana", "las mañanas", "esta mañana", "por la mañana": the morning, not tomorrow.
_MORNING_LEAD = re.compile(r"\b(?:la|las|esta|una|cada|media|toda|buena|buenas)\s*$", re.I)


def _weekday_index(name: str) -> int:
    folded = name.lower().replace("é", "e").replace("á", "a")
    for i, (es, en) in enumerate(zip(_ES_WEEKDAYS, _EN_WEEKDAYS, strict=True)):
        if folded in (es.replace("é", "e").replace("á", "a"), en.lower()):
            return i
    raise ValueError(name)  # pragma: no cover - the regexes only capture weekday names


def _count(raw: str, numbers: dict[str, int]) -> int:
    key = " ".join(raw.lower().split())
    return int(key) if key.isdigit() else numbers[key]


def _add_months(day: date, months: int) -> date:
    month0 = day.month - 1 + months
    year, month = day.year + month0 // 12, month0 % 12 + 1
    last_day = (date(year + month // 12, month % 12 + 1, 1) - timedelta(days=1)).day
    return date(year, month, min(day.day, last_day))


def _month_span(day: date) -> tuple[date, date]:
    first = day.replace(day=1)
    return first, _add_months(first, 1) - timedelta(days=1)


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _this_weekend(day: date) -> date:
    """Saturday of the reference week (Monday–Sunday)."""
    return _monday(day) + timedelta(days=5)


# --- rules ------------------------------------------------------------------------------------------------------
# A rule turns a match into (first day, last day, replacement text), or None to leave the words alone.
_Resolved = tuple[date, date, str]
_Handler = Callable[[re.Match[str], date, str], "_Resolved | None"]


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str]
    handler: _Handler


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(r"(?<!\w)" + pattern + r"(?!\w)", re.IGNORECASE)


def _es_day(day: date, article: str = "el") -> str:
    return f"{article} {day.isoformat()}".strip()


def _en_day(day: date, before: str, weekday: bool = False) -> str:
    text = f"{_EN_WEEKDAYS[day.weekday()]} {day.isoformat()}" if weekday else day.isoformat()
    return text if _EN_PREPOSITION.search(before) else f"on {text}"


def _en_month(day: date, before: str) -> str:
    text = f"{_EN_MONTHS[day.month - 1]} {day.year}"
    return text if _EN_PREPOSITION.search(before) else f"in {text}"


def _es_month(day: date, article: str | None) -> str:
    text = f"{_ES_MONTHS[day.month - 1]} de {day.year}"
    if article and article.lower() == "del":
        return f"de {text}"
    return f"en {text}"


def _offset_day(delta: int, es: bool) -> _Handler:
    def handle(match: re.Match[str], today: date, before: str) -> _Resolved:
        day = today + timedelta(days=delta)
        return day, day, _es_day(day) if es else _en_day(day, before)

    return handle


def _es_tomorrow(match: re.Match[str], today: date, before: str) -> _Resolved | None:
    if _MORNING_LEAD.search(before):
        return None  # "por la mañana", "esta mañana": a time of day
    day = today + timedelta(days=1)
    return day, day, _es_day(day)


def _es_today(match: re.Match[str], today: date, before: str) -> _Resolved | None:
    return today, today, _es_day(today)


def _weekday_rule(direction: str, es: bool) -> _Handler:
    """`next`: strictly after today; `this`: on or after today; `last`: strictly before today."""

    def handle(match: re.Match[str], today: date, before: str) -> _Resolved:
        target = _weekday_index(match.group("wd"))
        ahead = (target - today.weekday()) % 7
        if direction == "next":
            day = today + timedelta(days=ahead or 7)
        elif direction == "this":
            day = today + timedelta(days=ahead)
        else:
            day = today - timedelta(days=(today.weekday() - target) % 7 or 7)
        if es:
            article = (match.groupdict().get("art") or "el").lower()
            return day, day, f"{article} {_ES_WEEKDAYS[target]} {day.isoformat()}"
        return day, day, _en_day(day, before, weekday=True)

    return handle


def _week_rule(offset: int, es: bool) -> _Handler:
    def handle(match: re.Match[str], today: date, before: str) -> _Resolved:
        monday = _monday(today) + timedelta(weeks=offset)
        text = f"la semana del {monday.isoformat()}" if es else f"the week of {monday.isoformat()}"
        return monday, monday + timedelta(days=6), text

    return handle


def _weekend_rule(which: str, es: bool) -> _Handler:
    def handle(match: re.Match[str], today: date, before: str) -> _Resolved:
        saturday = _this_weekend(today)
        if which == "next" and today >= saturday:
            saturday += timedelta(weeks=1)  # on a weekend, "next weekend" is the following one
        elif which == "last":
            saturday -= timedelta(weeks=1)
        if es:
            article = (match.groupdict().get("art") or "el").lower()
            text = f"{article} fin de semana del {saturday.isoformat()}"
        else:
            text = f"the weekend of {saturday.isoformat()}"
        return saturday, saturday + timedelta(days=1), text

    return handle


def _month_rule(offset: int, es: bool) -> _Handler:
    def handle(match: re.Match[str], today: date, before: str) -> _Resolved:
        first, last = _month_span(_add_months(today.replace(day=1), offset))
        text = _es_month(first, match.groupdict().get("art")) if es else _en_month(first, before)
        return first, last, text

    return handle


def _count_rule(sign: int, es: bool) -> _Handler:
    def handle(match: re.Match[str], today: date, before: str) -> _Resolved | None:
        n = _count(match.group("n"), _ES_NUMBERS if es else _EN_NUMBERS)
        unit = match.group("unit").lower()
        if unit.startswith(("d", "dí", "di")):
            day = today + timedelta(days=sign * n)
            approx = False
        elif unit.startswith(("s", "w")):
            day = today + timedelta(weeks=sign * n)
            approx = True
        else:
            day = _add_months(today, sign * n)
            approx = True
        if es:
            return day, day, f"hacia el {day.isoformat()}" if approx else _es_day(day)
        if approx:
            return day, day, f"around {day.isoformat()}"
        return day, day, _en_day(day, before)

    return handle


_P = r"pr[óo]xim[oa]"
# One rule per line reads as a table; the formatter would break that.
# fmt: off
_RULES: tuple[_Rule, ...] = (
    # --- Spanish (longest phrases first: "pasado mañana" before "mañana") ---
    _Rule(_rx(r"pasado\s+ma[ñn]ana"), _offset_day(2, es=True)),
    _Rule(_rx(r"(?:anteayer|antes\s+de\s+ayer)"), _offset_day(-2, es=True)),
    _Rule(_rx(r"ayer"), _offset_day(-1, es=True)),
    _Rule(_rx(r"hoy(?!\s+(?:en\s+)?d[íi]a)"), _es_today),
    _Rule(_rx(r"ma[ñn]ana(?!s)"), _es_tomorrow),
    _Rule(_rx(r"(?P<art>el|del|al)\s+" + _P + r"\s+fin\s+de\s+semana"), _weekend_rule("next", es=True)),
    _Rule(_rx(r"(?P<art>el|del|al)\s+fin\s+de\s+semana\s+(?:que\s+viene|" + _P + ")"), _weekend_rule("next", es=True)),
    _Rule(_rx(r"(?P<art>el|del|al)\s+fin\s+de\s+semana\s+pasado"), _weekend_rule("last", es=True)),
    _Rule(_rx(r"(?P<art>el|del|al)\s+pasado\s+fin\s+de\s+semana"), _weekend_rule("last", es=True)),
    _Rule(_rx(r"este\s+fin\s+de\s+semana"), _weekend_rule("this", es=True)),
    _Rule(_rx(r"(?P<art>el|del|al)\s+" + _P + r"\s+" + _ES_WEEKDAY), _weekday_rule("next", es=True)),
    _Rule(_rx(r"(?P<art>el|del|al)\s+" + _ES_WEEKDAY + r"\s+(?:que\s+viene|" + _P + ")"),
          _weekday_rule("next", es=True)),
    _Rule(_rx(r"(?P<art>el|del|al)\s+" + _ES_WEEKDAY + r"\s+pasado"), _weekday_rule("last", es=True)),
    _Rule(_rx(r"(?P<art>el|del|al)\s+pasado\s+" + _ES_WEEKDAY), _weekday_rule("last", es=True)),
    _Rule(_rx(r"este\s+" + _ES_WEEKDAY), _weekday_rule("this", es=True)),
    _Rule(_rx(r"(?:la\s+)?(?:" + _P + r"\s+semana|semana\s+(?:que\s+viene|" + _P + "))"), _week_rule(1, es=True)),
    _Rule(_rx(r"(?:la\s+)?semana\s+pasada"), _week_rule(-1, es=True)),
    _Rule(_rx(r"esta\s+semana"), _week_rule(0, es=True)),
    _Rule(_rx(r"(?P<art>el|del)\s+(?:mes\s+que\s+viene|" + _P + r"\s+mes|mes\s+" + _P + ")"), _month_rule(1, es=True)),
    _Rule(_rx(r"(?P<art>el|del)\s+mes\s+pasado"), _month_rule(-1, es=True)),
    _Rule(_rx(r"este\s+mes"), _month_rule(0, es=True)),
    _Rule(_rx(r"dentro\s+de\s+" + _ES_COUNT + r"\s+(?P<unit>d[íi]as?|semanas?|mes(?:es)?)"), _count_rule(1, es=True)),
    _Rule(_rx(r"hace\s+" + _ES_COUNT + r"\s+(?P<unit>d[íi]as?|semanas?|mes(?:es)?)"), _count_rule(-1, es=True)),
    # --- English ---
    _Rule(_rx(r"the\s+day\s+after\s+tomorrow"), _offset_day(2, es=False)),
    _Rule(_rx(r"the\s+day\s+before\s+yesterday"), _offset_day(-2, es=False)),
    _Rule(_rx(r"tomorrow"), _offset_day(1, es=False)),
    _Rule(_rx(r"yesterday"), _offset_day(-1, es=False)),
    _Rule(_rx(r"(?:today|tonight)"), _offset_day(0, es=False)),
    _Rule(_rx(r"next\s+weekend"), _weekend_rule("next", es=False)),
    _Rule(_rx(r"last\s+weekend"), _weekend_rule("last", es=False)),
    _Rule(_rx(r"this\s+(?:coming\s+)?weekend"), _weekend_rule("this", es=False)),
    _Rule(_rx(r"(?:next|this\s+coming|coming)\s+" + _EN_WEEKDAY), _weekday_rule("next", es=False)),
    _Rule(_rx(r"this\s+" + _EN_WEEKDAY), _weekday_rule("this", es=False)),
    _Rule(_rx(r"last\s+" + _EN_WEEKDAY), _weekday_rule("last", es=False)),
    _Rule(_rx(r"(?:the\s+)?next\s+week"), _week_rule(1, es=False)),
    _Rule(_rx(r"(?:the\s+)?last\s+week"), _week_rule(-1, es=False)),
    _Rule(_rx(r"this\s+week"), _week_rule(0, es=False)),
    _Rule(_rx(r"next\s+month"), _month_rule(1, es=False)),
    _Rule(_rx(r"last\s+month"), _month_rule(-1, es=False)),
    _Rule(_rx(r"this\s+month"), _month_rule(0, es=False)),
    _Rule(_rx(r"in\s+" + _EN_COUNT + r"\s+(?P<unit>days?|weeks?|months?)"), _count_rule(1, es=False)),
    _Rule(_rx(_EN_COUNT + r"\s+(?P<unit>days?|weeks?|months?)\s+ago"), _count_rule(-1, es=False)),
)
# fmt: on


# --- absolute dates already in the text (for expiry) -----------------------------------------------------------
_ISO = r"(?P<iso>\d{4}-\d{2}-\d{2})"
_ABSOLUTE: tuple[tuple[re.Pattern[str], int], ...] = (
    # Our own renderings, so that resolving twice (or re-reading a stored fact) keeps the whole span.
    (re.compile(r"(?:fin\s+de\s+semana\s+del|weekend\s+of)\s+" + _ISO, re.I), 1),
    (re.compile(r"(?:semana\s+del|week\s+of)\s+" + _ISO, re.I), 6),
    (re.compile(r"(?<![\w-])" + _ISO + r"(?![\w-])"), 0),
)
_MONTH_NAME = re.compile(
    r"\b(?P<month>" + "|".join([*_ES_MONTHS, *(m.lower() for m in _EN_MONTHS)]) + r")(?:\s+de)?\s+(?P<year>\d{4})\b",
    re.IGNORECASE,
)


def _absolute_spans(text: str) -> list[DateSpan]:
    spans: list[DateSpan] = []
    taken: list[tuple[int, int]] = []
    for pattern, extra_days in _ABSOLUTE:
        for match in pattern.finditer(text):
            where = match.span("iso")
            if any(a <= where[0] < b for a, b in taken):
                continue
            try:
                start = date.fromisoformat(match.group("iso"))
            except ValueError:
                continue  # 2026-13-45 is not a date
            taken.append(where)
            spans.append(DateSpan(match.group(0), start, start + timedelta(days=extra_days)))
    for match in _MONTH_NAME.finditer(text):
        name = match.group("month").lower()
        month = (_ES_MONTHS.index(name) if name in _ES_MONTHS else [m.lower() for m in _EN_MONTHS].index(name)) + 1
        first, last = _month_span(date(int(match.group("year")), month, 1))
        spans.append(DateSpan(match.group(0), first, last))
    return spans


def _capitalised_like(original: str, replacement: str) -> str:
    if original[:1].isupper() and replacement:
        return replacement[0].upper() + replacement[1:]
    return replacement


def resolve_relative_dates(text: str, reference: datetime) -> DateResolution:
    """Replace the relative dates in `text` with absolute ones, counted from `reference` (the time the message
    was written, in its own timezone). Text without relative dates comes back unchanged."""
    today = reference.date()
    found: list[tuple[int, int, _Resolved, str]] = []
    for rule in _RULES:
        for match in rule.pattern.finditer(text):
            start, end = match.span()
            if any(start < b and a < end for a, b, _, _ in found):
                continue  # an earlier (longer, more specific) rule already took these words
            resolved = rule.handler(match, today, text[:start])
            if resolved is not None:
                found.append((start, end, resolved, match.group(0)))
    found.sort(key=lambda item: item[0])
    pieces: list[str] = []
    cursor = 0
    resolved_spans: list[DateSpan] = []
    for start, end, (first, last, replacement), phrase in found:
        pieces.append(text[cursor:start])
        pieces.append(_capitalised_like(phrase, replacement))
        cursor = end
        resolved_spans.append(DateSpan(phrase, first, last))
    pieces.append(text[cursor:])
    new_text = "".join(pieces)
    return DateResolution(text=new_text, resolved=tuple(resolved_spans), spans=tuple(_absolute_spans(new_text)))
