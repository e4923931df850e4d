"""The offline entity rules: canonical materials, services, quantities, tolerances, certifications, budgets and
deadlines found in a message by Spanish and English regular expressions for a machining shop.

Values are canonical ("aluminio 7075", "±0.05 mm", "ISO 9001", "1500 €") so that the session's entity merge
de-duplicates them across turns; names follow the message's language ("aluminum 7075" in English).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ..vocabulary import ALUMINIUM_GRADES, STAINLESS_GRADES, STEEL_GRADES
from .folding import fold
from .language import is_english
from .schema import ENTITY_KINDS

__all__ = ["extract_entities"]


@dataclass(frozen=True, slots=True)
class _Ctx:
    english: bool
    """The message is in English (canonical names follow the user's language)."""
    original: str
    """The text as written; the folded copy the patterns see has the same length."""


_Formatter = Callable[[re.Match[str], _Ctx], str | None]
"""Canonical value for a match, or None to ignore the match."""


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    value: _Formatter


def _fixed(es: str, en: str) -> _Formatter:
    return lambda _m, ctx: en if ctx.english else es


_NOT_A_UNIT = r"(?!\s*(?:€|eur|euros?|\$|usd|piezas?|pcs|units?|unidades|uds?|mm|%))"


def _aluminium(m: re.Match[str], ctx: _Ctx) -> str:
    grade = m.group("grade")
    name = "aluminum" if ctx.english else "aluminio"
    return f"{name} {grade}" if grade else name


def _stainless(m: re.Match[str], ctx: _Ctx) -> str | None:
    grade = m.group("grade")
    if not grade and m.group("kw") in ("ss", "aisi"):
        return None  # "ss"/"aisi" alone are too ambiguous
    name = "stainless steel" if ctx.english else "acero inoxidable"
    return f"{name} {grade.upper().replace(' ', '')}" if grade else name


def _steel(m: re.Match[str], ctx: _Ctx) -> str:
    grade = m.groupdict().get("grade")
    name = "steel" if ctx.english else "acero"
    if grade:
        pretty = grade.upper().replace("-", "").replace("CRMO", "CrMo")
        return f"{name} {pretty}"
    carbon = m.groupdict().get("carbon")
    if carbon:
        return "carbon steel" if ctx.english else "acero al carbono"
    return name


def _titanium(m: re.Match[str], ctx: _Ctx) -> str:
    grade = m.groupdict().get("grade") or ("5" if m.groupdict().get("ti64") else None)
    if ctx.english:
        return f"titanium grade {grade}" if grade else "titanium"
    return f"titanio grado {grade}" if grade else "titanio"


_NUMBER_WORDS = {
    "un": 1, "una": 1, "uno": 1, "one": 1, "dos": 2, "two": 2, "tres": 3, "three": 3,
    "cuatro": 4, "four": 4, "cinco": 5, "five": 5, "seis": 6, "six": 6, "siete": 7, "seven": 7,
    "ocho": 8, "eight": 8, "nueve": 9, "nine": 9, "diez": 10, "ten": 10, "doce": 12, "twelve": 12,
    "quince": 15, "fifteen": 15, "veinte": 20, "twenty": 20, "treinta": 30, "thirty": 30,
    "cincuenta": 50, "fifty": 50, "cien": 100, "hundred": 100, "mil": 1000,
}  # fmt: skip
_NUMBER = r"(?:\d{1,3}(?:[.,]\d{3})+|\d+|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + r")"


def _to_int(raw: str) -> int | None:
    raw = raw.strip()
    if raw in _NUMBER_WORDS:
        return _NUMBER_WORDS[raw]
    digits = re.sub(r"[.,](?=\d{3}\b)", "", raw)
    return int(digits) if digits.isdigit() else None


def _quantity(m: re.Match[str], ctx: _Ctx) -> str | None:
    n = _to_int(m.group("n"))
    if n is None or n <= 0:
        return None
    unit = m.group("unit")
    if unit.startswith(("prototip", "prototyp")):
        word = "prototypes" if ctx.english else "prototipos"
    elif ctx.english or unit.startswith(("unit", "pc", "piece", "part")):
        word = "units"
    else:
        word = "piezas"
    if n == 1:
        word = {"prototypes": "prototype", "prototipos": "prototipo", "units": "unit", "piezas": "pieza"}[word]
    return f"{n} {word}"


def _decimal(raw: str) -> str:
    return raw.replace(",", ".")


def _tolerance_pm(m: re.Match[str], ctx: _Ctx) -> str:
    unit = m.group("unit") or "mm"
    unit = "mm" if unit == "mm" else "µm"
    return f"±{_decimal(m.group('v'))} {unit}"


def _tolerance_plain(m: re.Match[str], ctx: _Ctx) -> str | None:
    value = _decimal(m.group("v"))
    unit = "mm" if m.group("unit") == "mm" else "µm"
    before = m.string[max(0, m.start() - 40) : m.start()]
    # A bare "0,01 mm" is a tolerance; "3,5 mm" is a dimension unless the sentence talks about tolerance.
    if "toleranc" in before or (unit == "mm" and float(value) < 0.5) or (unit == "µm" and float(value) < 100):
        return f"{value} {unit}"
    return None


def _iso2768(m: re.Match[str], ctx: _Ctx) -> str:
    cls = m.group("cls")
    return f"ISO 2768-{cls}" if cls else "ISO 2768"


def _it_grade(m: re.Match[str], ctx: _Ctx) -> str:
    return f"IT{m.group('g')}"


def _iso_cert(m: re.Match[str], ctx: _Ctx) -> str:
    return f"ISO {m.group('n')}"


def _en10204(m: re.Match[str], ctx: _Ctx) -> str:
    return f"EN 10204 {m.group('t') or '3.1'}"


def _amount(raw: str, k: str | None) -> str | None:
    raw = raw.strip()
    if re.fullmatch(r"\d{1,3}(?:[.,]\d{3})+", raw):
        value = float(re.sub(r"[.,]", "", raw))
    elif re.fullmatch(r"\d+(?:[.,]\d{1,2})?", raw):
        value = float(raw.replace(",", "."))
    else:
        return None
    if k:
        value *= 1000
    if value <= 0:
        return None
    return f"{value:.0f}" if value == int(value) else f"{value:.2f}"


def _euros(m: re.Match[str], ctx: _Ctx) -> str | None:
    amount = _amount(m.group("v"), m.groupdict().get("k"))
    return f"{amount} €" if amount else None


def _dollars(m: re.Match[str], ctx: _Ctx) -> str | None:
    amount = _amount(m.group("v"), m.groupdict().get("k"))
    return f"${amount}" if amount else None


def _as_said(m: re.Match[str], ctx: _Ctx) -> str:
    return " ".join(ctx.original[m.start() : m.end()].lower().split())


_WEEKDAYS_ES = r"(?:lunes|martes|miercoles|jueves|viernes|sabado|domingo)"
_WEEKDAYS_EN = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_MONTHS_ES = r"(?:enero|febrero|marzo|abril|mayo|junio|julio|agosto|septiembre|setiembre|octubre|noviembre|diciembre)"
_MONTHS_EN = r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
_SPAN_WORDS = r"(?:\d+|una?|dos|tres|cuatro|cinco|seis|ocho|diez|quince|one|two|three|four|five|six|ten)"

_QTY_UNITS = r"(?:piezas?|unidades|unidad|uds?\b\.?|pzs?\b\.?|prototipos?|units?|pcs\b\.?|pieces?|parts?|prototypes?)"
_MICRO = r"(?:mm|µm|um|micras?|microns?)"
_AMOUNT = r"(?P<v>\d{1,3}(?:[.,]\d{3})+|\d+(?:[.,]\d{1,2})?)"
_SPAN_UNITS = r"(?:dias|semanas|meses|dia|semana|mes)(?:\s+(?:habiles|laborables))?"


def _carbon_steel(m: re.Match[str], ctx: _Ctx) -> str:
    if m.group("grade"):
        return _steel(m, ctx)
    return "carbon steel" if ctx.english else "acero al carbono"


def _r(kind: str, value: _Formatter, *alternatives: str) -> _Rule:
    return _Rule(kind, re.compile("|".join(f"(?:{a})" for a in alternatives)), value)


_RULES: tuple[_Rule, ...] = (
    # materials
    _r(
        "materials",
        _aluminium,
        rf"\b(?:aluminio|aluminum|aluminium)\b(?:[\s-]*(?P<grade>{ALUMINIUM_GRADES}))?(?:[\s-]?t\d{{1,4}})?",
    ),
    _r("materials", _aluminium, rf"\b(?:al|alu)[\s-]?(?P<grade>{ALUMINIUM_GRADES})\b(?:[\s-]?t\d{{1,4}})?"),
    _r("materials", _aluminium, rf"\b(?P<grade>{ALUMINIUM_GRADES})(?:[\s-]?t\d{{1,4}})?\b{_NOT_A_UNIT}"),
    _r(
        "materials",
        _stainless,
        r"\b(?P<kw>acero\s+inoxidable|acero\s+inox|inoxidable|inox|stainless(?:\s+steel)?|ss|aisi)\b"
        rf"(?:[\s-]*(?:aisi\s*)?(?P<grade>{STAINLESS_GRADES})\b)?",
    ),
    _r(
        "materials",
        _steel,
        r"\b(?:acero|steel)\b(?P<carbon>\s+al\s+carbono|\s+de\s+carbono)?"
        rf"(?:[\s-]*(?P<grade>{STEEL_GRADES})\b)?",
    ),
    _r("materials", _carbon_steel, r"\bcarbon\s+steel\b(?:[\s-]*(?P<grade>1045|4140|c45e?))?"),
    _r("materials", _steel, rf"\b(?P<grade>{STEEL_GRADES})\b{_NOT_A_UNIT}"),
    _r(
        "materials",
        _titanium,
        r"\b(?:titanio|titanium)\b(?:[\s-]*\(?\s*(?:grado|grade|gr\.?)\s*(?P<grade>\d{1,2})\)?)?",
    ),
    _r("materials", _titanium, r"\b(?P<ti64>ti[\s-]?6al[\s-]?4v)\b"),
    _r("materials", _fixed("latón", "brass"), r"\b(?:laton|brass)\b"),
    _r("materials", _fixed("cobre", "copper"), r"\b(?:cobre|copper)\b"),
    _r("materials", _fixed("bronce", "bronze"), r"\b(?:bronce|bronze)\b"),
    _r("materials", _fixed("PEEK", "PEEK"), r"\bpeek\b"),
    _r("materials", _fixed("POM (Delrin)", "POM (Delrin)"), r"\b(?:pom(?:-[ch])?|delrin|(?:poli|poly)?acetal)\b"),
    _r("materials", _fixed("nylon (PA)", "nylon (PA)"), r"\b(?:nylon|nailon|poliamida|polyamide|pa\s?66?)\b"),
    _r("materials", _fixed("PTFE", "PTFE"), r"\b(?:ptfe|teflon)\b"),
    _r("materials", _fixed("policarbonato", "polycarbonate"), r"\b(?:policarbonato|polycarbonate)\b"),
    # services
    _r(
        "services",
        _fixed("fresado CNC", "CNC milling"),
        r"\b(?:fresad[oa]s?|fresar|fresadora)\b(?:\s+(?:en\s+)?cnc\b)?",
        r"\b(?:cnc\s+)?milling\b",
        r"\bmilled\b",
    ),
    _r(
        "services",
        _fixed("torneado CNC", "CNC turning"),
        r"\b(?:tornead[oa]s?|tornear|torno)\b(?:\s+(?:en\s+)?cnc\b)?",
        r"\b(?:cnc\s+)?turning\b",
        r"\blathe\b",
    ),
    _r(
        "services",
        _fixed("electroerosión", "EDM"),
        r"\b(?:electroerosion(?:ad[oa]s?)?|(?:wire\s+)?edm|corte\s+por\s+hilo)\b",
    ),
    _r("services", _fixed("rectificado", "grinding"), r"\b(?:rectificad[oa]s?|rectificar|rectificadora|grinding)\b"),
    _r(
        "services",
        _fixed("anodizado", "anodizing"),
        r"\b(?:anodizad[oa]s?|anodizar|anodi[sz]ed|anodi[sz]ing|anodi[sz]e)\b(?:\s+(?:duro|hard))?",
    ),
    _r("services", _fixed("soldadura", "welding"), r"\b(?:soldadur[ae]s?|soldar|soldad[oa]s?|welding|welded)\b"),
    _r(
        "services",
        _fixed("corte láser", "laser cutting"),
        r"\bcorte\s+(?:por\s+|con\s+|a\s+)?laser\b",
        r"\bcortad[oa]s?\s+(?:por|con|a)\s+laser\b",
        r"\blaser[\s-]+cut(?:ting)?\b",
    ),
    _r(
        "services",
        _fixed("tratamiento térmico", "heat treatment"),
        r"\btratamiento\s+termico\b|\btemplad[oa]s?\b|\bheat[\s-]+treat(?:ment|ed|ing)?\b",
    ),
    _r("services", _fixed("pulido", "polishing"), r"\b(?:pulid[oa]s?|pulir|polish(?:ed|ing)?)\b"),
    _r("services", _fixed("impresión 3D", "3D printing"), r"\bimpresion\s+3d\b|\b3d[\s-]+print(?:ing|ed)?\b"),
    _r(
        "services",
        _fixed("mecanizado CNC", "CNC machining"),
        r"\b(?:mecanizad[oa]s?|mecanizar)\b(?:\s+cnc\b)?",
        r"\b(?:cnc\s+)?machin(?:ing|ed)\b",
        r"\bcnc\b",
    ),
    # quantity
    _r("quantity", _quantity, rf"\b(?P<n>{_NUMBER})\s*(?P<unit>{_QTY_UNITS})\b"),
    # tolerances
    _r("tolerances", _tolerance_pm, rf"(?:±|\+/-|\+-|\+/−)\s*(?P<v>\d+(?:[.,]\d+)?)\s*(?P<unit>{_MICRO})?"),
    _r("tolerances", _tolerance_plain, rf"(?<![\d.,])(?P<v>\d+(?:[.,]\d+)?)\s*(?P<unit>{_MICRO})\b"),
    _r("tolerances", _iso2768, r"\biso\s*2768(?:[\s-]*(?P<cls>[fmcv]k?|[fmcv][hkl]))?\b"),
    _r("tolerances", _it_grade, r"\bit(?P<g>[5-9]|1[01])\b"),
    # certifications
    _r("certifications", _iso_cert, r"\biso\s*-?\s*(?P<n>9001|13485|14001|45001)\b(?::?\s*20\d\d)?"),
    _r("certifications", _fixed("AS9100", "AS9100"), r"\b(?:as|en)\s*-?\s*9100\s*d?\b"),
    _r("certifications", _fixed("IATF 16949", "IATF 16949"), r"\biatf\s*-?\s*16949\b"),
    _r("certifications", _en10204, r"\ben\s*10204(?:\s*(?:-|tipo|type)?\s*(?P<t>3\.1|3\.2|2\.2))?"),
    _r("certifications", _en10204, r"\bcertificad[oa]s?\s+(?:de\s+material\s+)?(?P<t>3\.1)\b"),
    _r("certifications", _fixed("NADCAP", "NADCAP"), r"\bnadcap\b"),
    _r("certifications", _fixed("RoHS", "RoHS"), r"\brohs\b"),
    # budget
    _r("budget", _euros, rf"(?<![\d.,]){_AMOUNT}\s*(?P<k>k)?\s*(?:€|eur\b|euros?\b)"),
    _r("budget", _euros, rf"€\s*{_AMOUNT}(?P<k>k)?"),
    _r("budget", _dollars, rf"\$\s*{_AMOUNT}(?P<k>k)?"),
    _r("budget", _dollars, rf"(?<![\d.,]){_AMOUNT}\s*(?P<k>k)?\s*(?:usd|dolares|dollars)\b"),
    # deadline
    _r(
        "deadline",
        _as_said,
        rf"\bpara\s+(?:el\s+)?(?:proximo\s+)?{_WEEKDAYS_ES}(?:\s+que\s+viene)?\b",
        r"\bpara\s+(?:manana|hoy|pasado\s+manana)\b",
        r"\bpara\s+(?:la\s+)?(?:proxima\s+semana|semana\s+que\s+viene)\b",
        rf"\bpara\s+(?:finales|final|fin)\s+de\s+(?:mes|semana|ano|{_MONTHS_ES})\b",
        rf"\b(?:en|dentro\s+de|plazo\s+(?:de\s+)?(?:entrega\s+(?:de\s+)?)?)\s*{_SPAN_WORDS}\s+{_SPAN_UNITS}\b",
        rf"\b(?:antes\s+del?|para\s+el)\s+\d{{1,2}}\s+de\s+{_MONTHS_ES}\b",
        r"\b(?:antes\s+del?|para\s+el)\s+\d{1,2}/\d{1,2}(?:/\d{2,4})?",
        rf"\bby\s+(?:next\s+)?(?:{_WEEKDAYS_EN}|tomorrow|today|next\s+week)\b",
        r"\bby\s+the\s+end\s+of\s+(?:the\s+)?(?:week|month|year)\b",
        rf"\b(?:in|within)\s+{_SPAN_WORDS}\s+(?:days|weeks|months|day|week|month)\b",
        rf"\bby\s+{_MONTHS_EN}\s+\d{{1,2}}\b|\bby\s+\d{{1,2}}/\d{{1,2}}(?:/\d{{2,4}})?",
    ),
    _r("deadline", _fixed("urgente", "urgent"), r"\burgente\b|\blo\s+antes\s+posible\b|\bcuanto\s+antes\b"),
    _r("deadline", _fixed("urgente", "urgent"), r"\basap\b|\burgent(?:ly)?\b|\bas\s+soon\s+as\s+possible\b"),
)


def extract_entities(text: str) -> dict[str, list[str]]:
    """The machining entities in `text`, by kind, in order of appearance, canonical and de-duplicated.

    `extract_entities("50 piezas en aluminio 7075, ±0.05 mm")` →
    `{"materials": ["aluminio 7075"], "quantity": ["50 piezas"], "tolerances": ["±0.05 mm"]}`
    """
    folded = fold(text)
    ctx = _Ctx(english=is_english(folded), original=text)
    candidates: list[tuple[int, int, str, str]] = []
    for rule in _RULES:
        for m in rule.pattern.finditer(folded):
            if m.end() == m.start():
                continue
            value = rule.value(m, ctx)
            if value:
                candidates.append((m.start(), m.end(), rule.kind, value))
    # Longest match wins where matches overlap ("acero inoxidable 316" over "acero"; "±0.05 mm" over "0.05 mm").
    candidates.sort(key=lambda c: (-(c[1] - c[0]), c[0]))
    taken: list[tuple[int, int, str, str]] = []
    for cand in candidates:
        if all(cand[1] <= t[0] or cand[0] >= t[1] for t in taken):
            taken.append(cand)
    entities: dict[str, list[str]] = {}
    for _start, _end, kind, value in sorted(taken):
        bucket = entities.setdefault(kind, [])
        if fold(value) not in {fold(v) for v in bucket}:
            bucket.append(value)
    return {kind: entities[kind] for kind in ENTITY_KINDS if kind in entities}
