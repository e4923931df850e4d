"""`RuleBasedExtractor`: deterministic, offline fact extraction from explicit statements.

It lets the plugin (and the demo) work with no API key. It recognises a small set of first-person statements
in Spanish and English ("prefiero aluminio 7075", "we need a tolerance of ±0.01 mm", "I can't exceed $2,000",
"la última entrega llegó tarde") and rewrites each as a short third-person fact in the message's language
("Prefiere aluminio 7075", "Needs a tolerance of ±0.01 mm", "Cannot exceed $2,000",
"Opinión: la última entrega llegó tarde"). Explicit memory requests ("Remember that my budget is 2000 EUR per
order", "recuerda que mi contacto de compras es Ana García", "apunta que…", "ten en cuenta que…", "keep in
mind…") keep the clause that follows, in the third person ("Their budget is 2000 EUR per order", "Su contacto
de compras es Ana García"), with a category read from its words. The quantity under discussion ("necesito otras
10 piezas") is never stored, asked or not. Anything else is left to an LLM extractor: precision over recall,
because a wrong long-term fact is worse than a missing one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..models import FactCategory, MemorizedFact, Message
from ..taxonomy import default_importance
from ..text import normalize_key
from .base import ExtractionOutcome
from .statement_rules import STATEMENT_RULES as _RULES
from .statement_rules import StatementRule as _Rule
from .third_person import TRIM as _TRIM
from .third_person import english_third_person as _english_third_person
from .third_person import spanish_third_person as _spanish_third_person

__all__ = ["RuleBasedExtractor"]

_EXPLICIT_CONFIDENCE = 0.9
_ALWAYS_CONFIDENCE = 0.95
_MIN_OBJECT_CHARS = 2
_MAX_OBJECT_CHARS = 200

# --- splitting -------------------------------------------------------------------------------------------------------
# Sentences end at . ! ? ; … followed by whitespace, or at a line break. "." only ends a sentence before whitespace so
# that "±0.05mm" and "1.000 €" stay whole.
_SENTENCE_END = re.compile(r"(?<=[.!?;…])\s+|\n+")
# A Spanish question is delimited by ¿...? and can sit inside a statement ("Prefiero 7075, ¿tenéis stock?"): cut it
# out and keep the rest. An unclosed "¿" runs to the end of the sentence.
_SPANISH_QUESTION = re.compile(r"¿[^?]*(?:\?|$)")
# Clause boundaries: where a statement's object ends ("prefiero aluminio, sobre todo para prototipos" → "aluminio").
# Commas only before whitespace, so "$2,000" and "±0,05" stay whole.
_CLAUSE_BREAK = re.compile(
    r",\s+|\s+[-–—]\s+|\s+\b(?:pero|porque|aunque|ya\s+que|sino|but|because|although|though|whereas)\b\s+",
    re.IGNORECASE,
)
# "y"/"e"/"and" join two statements only when a full statement follows ("prefiero 7075 y necesito ISO 9001"); in
# "prefiero aluminio y acero" the object keeps its "y". Optional adverbs/pronouns may sit between.
_AND = re.compile(r"\s+(?:y|e|and)\s+(?:(?:también|además|also|yo|nosotros|nosotras)\s+)*", re.IGNORECASE)

# --- what makes a match not a statement -----------------------------------------------------------------------
# Text right before the trigger that negates it, makes it conditional, hypothetical or a question:
# "no necesito", "si necesitamos", "tal vez prefiero", "if we need", "do I need", "maybe I prefer".
_BLOCKING_LEAD_IN = re.compile(
    r"(?:^|[^\w])(?:no|nunca|jam[aá]s|ni|si|cuando|quiz[aá]s?|tal\s+vez|a\s+lo\s+mejor|acaso|do|does|did|if|when"
    r"|whenever|unless|maybe|perhaps|not|never|should|would|could|can|will|don't|doesn't|didn't|don’t)\s*$",
    re.IGNORECASE,
)
# "siempre"/"always" anywhere in the lead-in or trigger marks a lasting habit: higher confidence.
_ALWAYS = re.compile(r"\b(?:siempre|always)\b", re.IGNORECASE)
# Objects that are a clause, a pronoun or a pointer into this conversation, not a thing: "prefiero que me llaméis",
# "I need you to...", "prefiero eso", "prefiero ese aluminio" (which would mean nothing in a later conversation).
_NOT_AN_OBJECT = re.compile(
    r"^(?:que|lo\s+que|you|your|it|that|this|those|these|them|what|eso|esto|ese|esa|este|esta|aquello|lo\s+mismo"
    r"|the\s+same)\b",
    re.IGNORECASE,
)
# The quantity under discussion ("50 piezas", "otras 10 piezas", "unas veinte unidades", "10 more parts",
# "más piezas"): never a lasting fact (taxonomy: requirement, "not the quantity of the request being discussed").
_QUANTITY = (
    r"(?:(?:otr[oa]s|unos|unas|otros|another|some|about|around|approximately|aproximadamente|como|al\s+menos"
    r"|at\s+least|hasta|up\s+to|m[aá]s\s+de|more\s+than|a)\s+)?"
    r"(?:\d[\d.,]*|un[oa]?|dos|tres|cuatro|cinco|seis|siete|ocho|nueve|diez|doce|quince|veinte|treinta|cuarenta"
    r"|cincuenta|cien|ciento|doscient[oa]s|quinient[oa]s|mil|one|two|three|four|five|six|seven|eight|nine|ten"
    r"|twelve|fifteen|twenty|thirty|forty|fifty|hundred|thousand|dozen|docena|m[aá]s|more|otr[oa]s)"
    r"\s*(?:(?:m[aá]s|more|extra|adicionales|additional)\s+)?"
    r"(?:piezas?|unidades|unidad|uds?|pcs|pieces?|units?|parts?|copias|copies|prototipos?|prototypes?|ejemplares)\b"
)
# Needs that are requests of this conversation, not lasting requirements: "necesito un presupuesto", "I need a quote",
# "necesito 50 piezas", "I need to check", "we need help".
_ONE_OFF_NEED = re.compile(
    r"^(?:(?:un|una|el|la|a|an|the|your|vuestro|vuestra|su)\s+)?(?:presupuesto|cotizaci[oó]n|oferta|precio|factura"
    r"|quote|quotation|price|estimate|invoice)\b"
    r"|^(?:to|saber|ayuda|help|hablar|some\s+help|m[aá]s\s+informaci[oó]n|more\s+info(?:rmation)?)\b"
    r"|^"
    + _QUANTITY
    # A count of anything needed ("necesito 40 bridas", "we need 200 brackets"): the order being discussed.
    + r"|^(?:otr[oa]s\s+|another\s+)?\d[\d.,]*\s+[^\W\d]",
    re.IGNORECASE,
)
# Politeness at the end of a clause is not part of the object: "necesito ISO 9001 por favor".
_TRAILING_FILLER = re.compile(r"(?:\s+(?:por\s+favor|please|gracias|thanks|thank\s+you|again))+\s*$", re.IGNORECASE)
# A copula left between a trigger and its object: "lo que prefiero es 7075", "my maximum budget is: 1500 EUR".
_LEADING_COPULA = re.compile(r"^(?:es|son|is|are)\b\s*", re.IGNORECASE)
# Feedback is about past work: the subject must point back in time ("la última entrega", "the previous batch").
_PAST_MARKER = re.compile(r"\b(?:[uú]ltim[oa]s?|anterior(?:es)?|pasad[oa]s?|last|previous|latest|recent|past)\b", re.I)
# ...and the rest must judge it ("llegó tarde", "had burrs"); "el pedido anterior fue de 50 piezas" is not feedback.
_EVALUATIVE = re.compile(
    r"\b(?:tarde|retras|con\s+retraso|a\s+tiempo|puntual|bien|mal|genial|perfect|excelente|estupend|buen|mal[oa]"
    r"|p[ée]sim|impecable|defectuos|da[ñn]ad|rot[oa]s?\b|rayad|rebaba|fuera\s+de|incorrect|incomplet|car[oa]s?\b"
    r"|barat|r[aá]pid|lent|problema|defecto|fallo|error|calidad|satisfech|content|decepcion|desastre|mejor|peor"
    r"|late|delay|on\s+time|early|well|badly|bad|good|great|excellent|poor|terrible|awful|flawless|defective"
    r"|damaged|broken|scratch|burr|out\s+of\s+tolerance|wrong|incomplete|expensive|cheap|fast|quick|slow|problem"
    r"|defect|issue|quality|disappoint|better|worse|perfect)",
    re.IGNORECASE,
)
_CERTIFICATION = re.compile(r"certifica|certified|certificate", re.IGNORECASE)


# --- explicit memory requests ------------------------------------------------------------------------------
# "Remember that…", "Please remember…", "recuerda que…", "apunta que…", "ten en cuenta que…": the user asks to
# keep what follows. Every phrase here is also an explicit trigger of the extraction policy (`policy.py`), so the
# request is extracted at once. Fillers may come first ("y", "also", "por favor", "please").
_REQUEST_FILLER = r"(?:(?:y|e|and|also|adem[aá]s|tambi[eé]n|oye|ah|por\s+favor|please|pls|so)[\s,]+)*"
_SPANISH_REQUEST = re.compile(
    r"^" + _REQUEST_FILLER + r"(?:recuerd[ae]n?|recordad|no\s+(?:te\s+)?olvides(?:\s+de)?|ap[uú]nta(?:te|lo)?"
    r"|apuntad|toma\s+nota(?:\s+de)?|ten(?:ed|ga|gan)?\s+en\s+cuenta)(?:\s+por\s+favor)?\b[\s:,]*(?:que\b\s*)?",
    re.IGNORECASE,
)
_ENGLISH_REQUEST = re.compile(
    r"^" + _REQUEST_FILLER + r"(?:remember|don't\s+forget|don’t\s+forget|do\s+not\s+forget|keep\s+in\s+mind"
    r"|make\s+a\s+note(?:\s+of)?|take\s+note(?:\s+of)?)(?:\s+please)?\b[\s:,]*(?:that\b\s*)?",
    re.IGNORECASE,
)
_OTHER_FACT: FactCategory = "fact"
_REQUESTED_CONFIDENCE = 0.95
"""The user asked to remember it: as sure as a stated habit ("siempre")."""
# Verbs of being or having: "remember that the plant is in Bilbao" says something without a first-person word.
_STATEMENT_WORD = re.compile(
    r"\b(?:i|we|my|our|me|us|i'm|we're|i’m|we’re|is|are|was|were|am|has|have|mi|mis|nuestr[oa]s?|yo|nosotr[oa]s"
    r"|me|nos|es|son|era|eran|est[aá]n?|estamos|estoy|somos|soy|tiene|tienen|tenemos|tengo|hay)\b",
    re.IGNORECASE,
)
# A quantity in a request is the request under discussion unless it recurs ("500 piezas cada mes").
_RECURRING = re.compile(
    r"\b(?:cada|tod[oa]s\s+l[oa]s|siempre|por\s+pedido|al\s+(?:mes|a[nñ]o)|every|each|always|per\s+(?:order|month"
    r"|year|week)|a\s+(?:month|year|week))\b",
    re.IGNORECASE,
)
# Category of a requested clause, by its words (first that matches; otherwise "fact").
_REQUEST_CATEGORIES: tuple[tuple[re.Pattern[str], FactCategory], ...] = (
    (
        re.compile(
            r"\b(?:presupuesto|budget|l[ií]mite|limit|tope|m[aá]ximo|maximum|max|no\s+m[aá]s\s+de|no\s+more\s+than"
            r"|cannot\s+exceed|can't\s+exceed)\b.*\d|\d.*\b(?:como\s+m[aá]ximo|at\s+most|maximum)\b",
            re.IGNORECASE,
        ),
        "constraint",
    ),
    (
        re.compile(
            r"\b(?:contacto|contact|compras|buyer|purchasing|procurement|responsable|jef[ea]|manager|email|correo)\b",
            re.IGNORECASE,
        ),
        "contact",
    ),
    (re.compile(r"\b(?:objetivo|meta|goal|aim)\b", re.IGNORECASE), "goal"),
    (
        re.compile(
            r"\b(?:cada|tod[oa]s\s+l[oa]s|every|each)\s+(?:\w+\s+)?(?:d[ií]as?|semanas?|mes(?:es)?|a[nñ]os?|lunes|martes"
            r"|mi[eé]rcoles|jueves|viernes|day|week|month|year|monday|tuesday|wednesday|thursday|friday)\b",
            re.IGNORECASE,
        ),
        "routine",
    ),
    (re.compile(r"\b(?:prefer\w*|prefier\w*|gusta|like|likes|favou?rite|favorit[oa])\b", re.IGNORECASE), "preference"),
    (
        re.compile(
            r"\b(?:need|needs|require\w*|must|necesit\w*|requier\w*|requerimos|exig\w*|tienen\s+que|deben"
            r"|certifica\w*|certificate\w*|certified)\b",
            re.IGNORECASE,
        ),
        "requirement",
    ),
)


def _parse_request(clause: str, *, spanish: bool) -> tuple[str, FactCategory, float] | None:
    """The fact a memory request asks to keep (`clause`: what follows "remember that"), or None."""
    if _first_match(clause) is not None:
        # A statement the rules know ("recuerda que necesitamos ISO 9001"): its rule decides, one-off
        # quantities and pointers into the conversation included.
        parsed = _parse_statement(clause)
        if parsed is None:
            return None
        return parsed[0], parsed[1], max(parsed[2], _REQUESTED_CONFIDENCE)
    clause = _clean_object(clause)
    if not _MIN_OBJECT_CHARS <= len(clause) <= _MAX_OBJECT_CHARS or len(clause.split()) < 2:
        return None
    content = (_spanish_third_person(clause) if spanish else _english_third_person(clause)).strip(_TRIM)
    # It must say something about the user (a first-person word, now rewritten, or a verb of being or having),
    # not point at a thing ("remember that supplier") or into the conversation ("remember this").
    if not content or _NOT_AN_OBJECT.match(clause) or (content == clause and not _STATEMENT_WORD.search(clause)):
        return None
    if re.search(_QUANTITY, clause, re.IGNORECASE) and not _RECURRING.search(clause):
        return None  # "recuerda que son otras 10 piezas": the request under discussion
    category = next((c for pattern, c in _REQUEST_CATEGORIES if pattern.search(clause)), _OTHER_FACT)
    return content[0].upper() + content[1:], category, _REQUESTED_CONFIDENCE


# A rejection with its object first: "el acero inoxidable no nos sirve", "el latón no me interesa".
_OBJECT_FIRST_REJECTION = re.compile(
    r"^(?:(?:pero|y|es\s+que)\s+)?(?:(?:el|la|los|las)\s+)?(?P<object>[^,;:]{2,60}?)\s+no\s+(?:me|nos)\s+"
    r"(?:sirven?|valen?|interesan?|convencen?|gustan?)\b",
    re.IGNORECASE,
)


def _parse(statement: str) -> tuple[str, FactCategory, float] | None:
    """Canonical content, category and confidence of a statement or a memory request, or None."""
    rejected = _OBJECT_FIRST_REJECTION.match(statement.strip())
    if rejected and not _NOT_AN_OBJECT.match(rejected["object"]):
        return f"No quiere que le sugieran {rejected['object'].strip()}", "rejection", _EXPLICIT_CONFIDENCE
    spanish = _SPANISH_REQUEST.match(statement)
    request = spanish or _ENGLISH_REQUEST.match(statement)
    if request is None:
        return _parse_statement(statement)
    return _parse_request(statement[request.end() :], spanish=spanish is not None)


def _statements(text: str) -> Iterator[str]:
    """Split a message into candidate statements: sentences, minus questions, cut into clauses, cut at "y"/"and"
    only where a full statement follows."""
    for sentence in _SENTENCE_END.split(text):
        sentence = _SPANISH_QUESTION.sub(" ", sentence).strip()
        # An English question has no opening mark: a "?" left here means the sentence asks, not states.
        if not sentence or "?" in sentence:
            continue
        for clause in _CLAUSE_BREAK.split(sentence):
            yield from _split_on_and(clause)


def _split_on_and(clause: str) -> Iterator[str]:
    start = 0
    for joint in _AND.finditer(clause):
        if any(rule.trigger.match(clause, joint.end()) for rule in _RULES):
            yield clause[start : joint.start()]
            start = joint.end()
    yield clause[start:]


def _clean_object(raw: str) -> str:
    obj = _LEADING_COPULA.sub("", raw.strip(_TRIM))
    obj = _TRAILING_FILLER.sub("", obj)
    return obj.strip(_TRIM)


def _first_match(statement: str) -> tuple[_Rule, re.Match[str]] | None:
    best: tuple[_Rule, re.Match[str]] | None = None
    for rule in _RULES:
        match = rule.trigger.search(statement)
        if match and (best is None or match.start() < best[1].start()):
            best = (rule, match)
    return best


def _parse_statement(statement: str) -> tuple[str, FactCategory, float] | None:
    """Canonical content, category and confidence of one statement, or None if it is not one we recognise."""
    found = _first_match(statement)
    if found is None:
        return None
    rule, match = found
    lead_in = statement[: match.start()]
    if _BLOCKING_LEAD_IN.search(lead_in):
        return None
    obj = _clean_object(statement[match.end() :])
    if not _MIN_OBJECT_CHARS <= len(obj) <= _MAX_OBJECT_CHARS:
        return None
    if rule.feedback:
        if not _PAST_MARKER.search(match.group(0)) or not _EVALUATIVE.search(obj):
            return None
        # The subject always starts with an article or possessive: lower-case it inside the sentence.
        clause = match.group(0) + obj
        content = rule.template.format(clause[0].lower() + clause[1:])
    else:
        if (_NOT_AN_OBJECT.match(obj) and not rule.time_object) or (rule.one_off_check and _ONE_OFF_NEED.match(obj)):
            return None
        template = rule.template
        if rule.certification_template and _CERTIFICATION.search(obj):
            template = rule.certification_template
        content = template.format(obj)
    always = _ALWAYS.search(lead_in + match.group(0))
    return content, rule.category, _ALWAYS_CONFIDENCE if always else _EXPLICIT_CONFIDENCE


@dataclass
class RuleBasedExtractor:
    """Offline `FactExtractor` for explicit first-person statements in Spanish and English.

    Only the user's messages are read. Each recognised statement becomes a `MemorizedFact` with source
    "explicit", confidence 0.9 (0.95 with "siempre"/"always"), the category's default importance
    (`memory_plugin.taxonomy`), and the message's id and timestamp as provenance; a memory request ("remember
    that…") gives 0.95. Questions, negated and conditional statements, and one-off requests ("necesito un
    presupuesto", "necesito otras 10 piezas") are not facts.
    """

    @property
    def name(self) -> str:
        """Always "rules"."""
        return "rules"

    async def extract(
        self, messages: Sequence[Message], *, known_facts: Sequence[MemorizedFact] = ()
    ) -> ExtractionOutcome:
        """Facts stated in the user's `messages`; one already in `known_facts` comes back in its known wording.

        The same fact stated in several messages is returned once, with every message id as provenance.
        """
        # A restated known fact comes back in the stored wording, so that it reinforces the stored row.
        known = {normalize_key(fact.content): fact.content for fact in known_facts}
        found: dict[str, MemorizedFact] = {}
        for message in messages:
            if message.role != "user":
                continue
            for statement in _statements(message.content):
                parsed = _parse(statement)
                if parsed is None:
                    continue
                content, category, confidence = parsed
                key = normalize_key(content)
                content = known.get(key, content)
                previous = found.get(key)
                if previous is not None:
                    if message.id not in previous.source_message_ids:
                        found[key] = previous.model_copy(
                            update={
                                "source_message_ids": (*previous.source_message_ids, message.id),
                                "confidence": max(previous.confidence, confidence),
                            }
                        )
                    continue
                found[key] = MemorizedFact(
                    content=content,
                    category=category,
                    confidence=confidence,
                    source="explicit",
                    importance=default_importance(category),
                    source_message_ids=(message.id,),
                    timestamp=message.timestamp,
                )
        return ExtractionOutcome(facts=list(found.values()), rejected=0, model_calls=0)
