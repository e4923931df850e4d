"""What a question says about *when*: dates it names and whether it asks for a time.

`analyze_query("What did Gina find on 1 February, 2023?")` gives one date window (that day);
"¿Qué hizo en mayo de 2023?" the month of May 2023; "When did Melanie go camping in June?" the month June of
any year and `asks_when`. The search boosts facts stated inside (or near) those windows, and for a "when"
question facts whose text holds a time expression ("yesterday", "last week", "el sábado"): the turn that
answers "when" is usually the one that says it.

Pure, English and Spanish; anything not understood is simply not used (the search still ranks by text and
meaning).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["DateWindow", "QueryAnalysis", "analyze_query"]

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan", "enero"),
            ("february", "feb", "febrero"),
            ("march", "mar", "marzo"),
            ("april", "apr", "abril"),
            ("may", "mayo"),
            ("june", "jun", "junio"),
            ("july", "jul", "julio"),
            ("august", "aug", "agosto"),
            ("september", "sep", "sept", "septiembre", "setiembre"),
            ("october", "oct", "octubre"),
            ("november", "nov", "noviembre"),
            ("december", "dec", "diciembre"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ORD = r"(?:st|nd|rd|th|º)?"
# "13 October 2023", "October 13, 2023", "13 de octubre de 2023", "October 2023", "mayo de 2023", "June".
_DATE = re.compile(
    rf"\b(?:(?P<day1>\d{{1,2}}){_ORD}\s+(?:de\s+)?)?(?P<month>{_MONTH})\.?"
    rf"(?:\s+(?P<day2>\d{{1,2}}){_ORD}\b)?(?:,?\s*(?:de\s+|del\s+)?(?P<year>(?:19|20)\d\d)\b)?",
    re.IGNORECASE,
)
_YEAR = re.compile(r"\b(?:in|en|of|de|del|during|durante)\s+((?:19|20)\d\d)\b", re.IGNORECASE)
_ISO = re.compile(r"\b((?:19|20)\d\d)-(\d{1,2})-(\d{1,2})\b")
_ASKS_WHEN = re.compile(
    r"^\W*(?:when|what (?:date|day|year|month|time)|how long (?:ago|before|after)|cu[aá]ndo|"
    r"qu[eé] (?:d[ií]a|fecha|a[nñ]o|mes))\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class DateWindow:
    """A span of time a question names, `[start, end)`, in UTC."""

    start: datetime
    """First instant inside."""
    end: datetime
    """First instant after."""


@dataclass(frozen=True, slots=True)
class QueryAnalysis:
    """What `analyze_query` found in a question."""

    windows: tuple[DateWindow, ...] = ()
    """Dates with a year: a day, a month or a year."""
    months: tuple[int, ...] = ()
    """Months named without a year (1–12): matched in any year."""
    asks_when: bool = False
    """The question asks for a time ("When…", "¿Cuándo…", "What date…")."""


def _month_window(year: int, month: int) -> DateWindow:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return DateWindow(start, end)


def _day_window(year: int, month: int, day: int) -> DateWindow | None:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
    except ValueError:  # "February 31": not a date, ignore it rather than guess
        return None
    return DateWindow(start, start + timedelta(days=1))


def analyze_query(text: str) -> QueryAnalysis:
    """Dates, months and "when" in `text` (see the module docstring)."""
    windows: list[DateWindow] = []
    months: list[int] = []
    for match in _ISO.finditer(text):
        window = _day_window(int(match[1]), int(match[2]), int(match[3]))
        if window:
            windows.append(window)
    for match in _DATE.finditer(text):
        word = match["month"].lower()
        if word == "may" and not (match["day1"] or match["day2"] or match["year"]):
            continue  # "may" alone is far more often the verb than the month
        if word in ("mar", "jun", "jul", "sep", "oct", "nov", "dec", "jan", "feb", "apr", "aug", "sept") and not (
            match["day1"] or match["day2"] or match["year"]
        ):
            continue  # a bare abbreviation ("mar" is also Spanish for sea) is too weak alone
        month = _MONTHS[word]
        day = match["day1"] or match["day2"]
        if match["year"]:
            year = int(match["year"])
            window = _day_window(year, month, int(day)) if day else _month_window(year, month)
            if window:
                windows.append(window)
        else:
            months.append(month)
    if not windows:
        for match in _YEAR.finditer(text):
            year = int(match[1])
            windows.append(DateWindow(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)))
    return QueryAnalysis(
        windows=tuple(dict.fromkeys(windows)),
        months=tuple(dict.fromkeys(months)),
        asks_when=bool(_ASKS_WHEN.search(text)),
    )
