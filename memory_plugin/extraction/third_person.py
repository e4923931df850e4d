"""A first-person clause rewritten in the third person, as a fact about the user ("my budget is 2000 EUR" ->
"their budget is 2000 EUR", "trabajamos con titanio" -> "trabaja con titanio"): pronouns and possessives in
English; possessives, pronouns and first-person verbs in Spanish. Pure."""

from __future__ import annotations

import re

__all__ = ["TRIM", "english_third_person", "spanish_third_person"]

TRIM = " \t.,;:!¡…\"'“”«»"
"""Punctuation and quotes stripped around a word or an object."""

# Third person for a requested clause. English: pronouns ("my budget" → "their budget", "we are" → "they are").
_EN_PERSON = {
    "i": "they", "we": "they", "my": "their", "our": "their", "me": "them", "us": "them", "mine": "theirs",
    "ours": "theirs", "myself": "themselves", "ourselves": "themselves", "i'm": "they're", "we're": "they're",
    "i've": "they've", "we've": "they've", "i'll": "they'll", "we'll": "they'll", "i'd": "they'd", "we'd": "they'd",
}  # fmt: skip
_EN_PERSON_WORD = re.compile(r"\b(?:I|[Ww]e|[Mm]y|[Oo]ur|me|us|mine|ours|myself|ourselves)(?:['’](?:m|re|ve|ll|d))?\b")
_EN_AM = re.compile(r"\b(they)\s+(?:am|was)\b", re.IGNORECASE)
# Spanish: possessives and pronouns, and first-person verbs ("trabajamos" → "trabaja", "soy" → "es").
_ES_PERSON = {
    "mi": "su", "mis": "sus", "nuestro": "su", "nuestra": "su", "nuestros": "sus", "nuestras": "sus", "me": "le",
    "nos": "les", "yo": "", "nosotros": "", "nosotras": "",
}  # fmt: skip
_ES_VERBS = {
    "soy": "es", "somos": "son", "estoy": "está", "estamos": "está", "tengo": "tiene", "tenemos": "tiene",
    "voy": "va", "vamos": "va", "hago": "hace", "quiero": "quiere", "queremos": "quiere", "puedo": "puede",
    "podemos": "puede", "cerramos": "cierra", "pido": "pide", "pedimos": "pide", "prefiero": "prefiere",
    "preferimos": "prefiere", "suelo": "suele", "solemos": "suele", "vuelvo": "vuelve", "volvemos": "vuelve",
    "empezamos": "empieza", "seguimos": "sigue", "sigo": "sigue", "venimos": "viene", "vengo": "viene",
    "decimos": "dice", "digo": "dice", "servimos": "sirve", "medimos": "mide", "pensamos": "piensa",
    "necesito": "necesita", "uso": "usa", "trabajo": "trabaja", "compro": "compra", "recibo": "recibe",
    "vendo": "vende", "fabrico": "fabrica", "vivo": "vive", "hay": "hay",
}  # fmt: skip
# Regular first-person plurals ("trabajamos", "recibimos"); nouns that end alike are left alone.
_ES_PLURAL_VERB = re.compile(r"^(\w{2,}?)(amos|emos|imos)$", re.IGNORECASE)
_ES_NOT_VERBS = frozenset({"gramos", "kilogramos", "miligramos", "ramos", "tramos", "amos", "extremos", "primos"})
# A singular verb form is also a noun ("mi trabajo"): only changed where a verb stands (first word, after "yo").
_ES_VERB_SLOT = frozenset({"", "yo", "no", "ya", "siempre", "también", "tambien", "solo", "sólo", "nunca"})


def english_third_person(clause: str) -> str:
    """`clause` with English first-person pronouns and possessives in the third person."""

    def swap(m: re.Match[str]) -> str:
        return _EN_PERSON[m.group(0).lower().replace("’", "'")]

    return _EN_AM.sub(lambda m: f"{m.group(1)} {'are' if m.group(0).lower().endswith('am') else 'were'}",
                      _EN_PERSON_WORD.sub(swap, clause))  # fmt: skip


def spanish_third_person(clause: str) -> str:
    """`clause` with Spanish first-person possessives, pronouns and verbs in the third person."""
    out: list[str] = []
    previous = ""
    for word in clause.split():
        bare = word.strip(TRIM)
        key = bare.lower()
        new = bare
        if key in _ES_PERSON:
            new = _ES_PERSON[key]
        elif key in _ES_VERBS and (key.endswith("mos") or previous in _ES_VERB_SLOT):
            new = _ES_VERBS[key]
        elif key not in _ES_NOT_VERBS and (plural := _ES_PLURAL_VERB.match(bare)):
            new = plural.group(1) + ("a" if plural.group(2).lower() == "amos" else "e")
        if new:
            out.append(word.replace(bare, new, 1) if bare else word)
        previous = key
    return " ".join(out)
