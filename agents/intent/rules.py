"""The offline intent rules: Spanish and English keywords decide the intent, whether the request is complete and
whether the user states a lasting preference, over the entities the entity rules found. A rejection ("nunca me
sugieras titanio", "never suggest 304", "no me ofrezcas latón", "el inoxidable no nos sirve") is never a
preference (`is_rejection`)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from .entities import extract_entities
from .folding import fold
from .schema import Classification, Intent

__all__ = ["classify_offline", "is_rejection"]


def _any(patterns: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns))


_GREETING = re.compile(
    r"^\W*(?:hola|buenas(?:\s+(?:tardes|noches))?|buenos\s+dias|saludos|hey|hi|hello|good\s+(?:morning|afternoon|evening))\b"
)
_FEEDBACK = _any(
    [
        r"\bllegar(?:on|o)\s+(?:tarde|con\s+retraso|dan|rot)",
        r"\b(?:la|el|las|los)\s+ultim[oa]s?\s+(?:entrega|pedido|lote)s?\b.*\b(?:tarde|retraso|perfect|bien|mal|defect)",
        r"\bmuy\s+content[oa]s?\b|\bsatisfech[oa]s?\b|\bdecepcionad[oa]s?\b",
        r"\b(?:excelente|buen|gran)\s+trabajo\b|\bmala\s+calidad\b|\bdefectuos[oa]s?\b|\bqueja\b|\breclamacion\b",
        r"\bfuera\s+de\s+tolerancia\b|\bgracias\s+por\s+(?:la|el|las|los)\s+(?:entrega|trabajo|piezas)",
        r"\barrived\s+late\b|\b(?:was|were)\s+late\b|\b(?:great|good|excellent)\s+(?:job|work)\b|\bwell\s+done\b",
        r"\bpoor\s+quality\b|\bdefective\b|\bcomplaint\b|\bout\s+of\s+tolerance\b|\bvery\s+happy\b|\bdisappointed\b",
    ]
)
_ORDER_WORD = re.compile(r"\bpedidos?\b|\bencargos?\b|\borders?\b|\benvios?\b|\bshipment\b")
_STATUS_WORD = _any(
    [
        r"\bestado\b|\bseguimiento\b|\bdonde\s+esta\b|\bcuando\s+(?:llega|llegara|sale|saldra|enviais|lo\s+enviais)",
        r"\bya\s+(?:ha|han)\s+(?:salido|sido\s+enviad)|\benviad[oa]\b|\bretrasad[oa]\b|\bnumero\b|\bn[o°º]\s*\d",
        r"\bstatus\b|\bwhere\s+is\b|\bwhen\s+will\b|\btrack(?:ing)?\b|\bshipped\b|\barrive\b|\bdelayed\b|#\s*\d",
    ]
)
_BUDGET_WORD = _any(
    [
        r"\bpresupuest|\bcotiza|\boferta\b|\bprecio|\bcuanto\s+(?:cuesta|costaria|vale|saldria|me\s+sale)\b|\bcoste\b",
        r"\bfabrica(?:r|ros|ria)\b|\bhacer(?:me|nos)?\s+\d|\bnecesit(?:o|amos)\s+(?:otr[oa]s\s+)?\d",
        r"\bquote\b|\bquotation\b|\bpricing\b|\bprice\b|\bhow\s+much\b|\brfq\b|\bestimate\b",
    ]
)
_QUESTION = _any(
    [
        r"\?",
        r"^\W*(?:que|cual|cuales|como|por\s+que|se\s+puede|es\s+posible|podeis|puedes|sabeis)\b",
        r"^\W*(?:what|which|how|why|can\s+you|could\s+you|is\s+it\s+possible|do\s+you)\b",
    ]
)
_TECHNICAL_WORD = re.compile(
    r"\bmaterial|\btoleranc|\bacabado|\brugosidad|\bdureza|\bespesor|\brosca|\btratamiento|\bra\s?\d"
    r"|\bfinish\b|\broughness\b|\bhardness\b|\bthickness\b|\bthread"
)
_COMPLETE = _any(
    [
        r"\b(?:lo\s+|la\s+|te\s+lo\s+)?confirm(?:o|amos|ado|ada)\b|\badelante\b|\bprocede(?:d|r)?\b|\bprocedamos\b",
        r"\beso\s+es\s+todo\b|\bnada\s+mas\b|\bcerramos\b|\bcerrad(?:o|a)\b|\bde\s+acuerdo,?\s+(?:envia|manda)",
        r"\b(?:envia|manda|enviad|mandad)(?:me|nos)\s+el\s+presupuesto\b|\b(?:puedes|podeis)\s+(?:enviar|mandar)(?:me|nos)\s+el\s+presupuesto\b",
        r"\bthat'?s\s+all\b|\bi\s+confirm\b|\bwe\s+confirm\b|\bconfirmed\b|\bgo\s+ahead\b|\bplease\s+proceed\b",
        r"\bsend\s+(?:me|us)\s+the\s+quote\b",
    ]
)
_NEGATED_COMPLETE = re.compile(
    r"\bno\s+(?:lo\s+|la\s+)?confirm|\btodavia\s+no\b|\baun\s+no\b|\bnot\s+yet\b|\bdon'?t\s+confirm"
)
_EXPLICIT = _any(
    [
        r"\bprefier[eo]\b|\bpreferimos\b|\bpreferiria(?:mos)?\b|\bsiempre\b|\brecuerd[ae]\b|\brecordad\b",
        r"\bten(?:ed)?\s+en\s+cuenta\b|\bnunca\b|\bsolemos\b|\bnormalmente\s+(?:usamos|pedimos|trabajamos)\b",
        r"\ben\s+tod[oa]s\s+(?:las|los|nuestr[oa]s)\s+(?:piezas|pedidos|proyectos|encargos)\b|\bpor\s+pedido\b",
        r"\bpara\s+(?:futuros|proximos|todos\s+los)\s+(?:pedidos|proyectos|encargos)\b",
        r"\bi\s+prefer\b|\bwe\s+prefer\b|\balways\b|\bremember\b|\bnever\b|\bkeep\s+in\s+mind\b|\bwe\s+usually\b",
        r"\b(?:for|on|in)\s+(?:all|every)\s+(?:parts|orders|projects)\b|\bper\s+order\b",
    ]
)


_REJECTION = _any(
    [
        r"\b(?:no|nunca|jamas)\s+(?:me|nos)\s+(?:vuelvas\s+a\s+)?(?:sugier|recomiend|ofrezc|propong|ofert)\w*",
        r"\bno\s+(?:me|nos)\s+(?:sirven?|valen?|interesan?|convencen?|gustan?)\b|\bevita(?:d|r)?\b|\bno\s+quiero\b",
        r"\b(?:never|don'?t|do\s+not)\s+(?:suggest|recommend|offer|propose|quote)\b|\bavoid\b",
        r"\b(?:is|are)\s+no\s+good\s+(?:to|for)\s+(?:me|us)\b|\bdoes(?:n'?t|\s+not)\s+work\s+for\s+(?:me|us)\b",
    ]
)


def is_rejection(text: str) -> bool:
    """Whether the message rejects something ("never suggest X", "nunca me sugieras X", "X no nos sirve"): its
    materials are rejected, never preferred."""
    return bool(_REJECTION.search(fold(text)))


def classify_offline(text: str) -> Classification:
    """Classify one message with deterministic Spanish/English rules (no model, no network)."""
    folded = fold(text)
    entities = extract_entities(text)
    complete = bool(_COMPLETE.search(folded)) and not _NEGATED_COMPLETE.search(folded)
    explicit = bool(_EXPLICIT.search(folded)) and not _REJECTION.search(folded)
    technical = any(k in entities for k in ("materials", "services", "tolerances", "certifications"))
    request_data = any(k in entities for k in ("quantity", "budget", "deadline"))

    intent: Intent
    if _FEEDBACK.search(folded):
        intent = "feedback"
    elif _ORDER_WORD.search(folded) and _STATUS_WORD.search(folded) and not _BUDGET_WORD.search(folded):
        intent = "order_status"
    elif _BUDGET_WORD.search(folded) or request_data or complete:
        intent = "budget_request"
    elif _QUESTION.search(folded) and (technical or _TECHNICAL_WORD.search(folded)):
        intent = "technical_question"
    elif technical:
        intent = "budget_request"  # "Prefiero aluminio 7075", "Necesitamos ISO 9001": details for the request
    elif _GREETING.search(folded) and len(folded.split()) <= 6:
        intent = "greeting"
    else:
        intent = "other"
    return Classification(intent=intent, entities=entities, request_complete=complete, explicit_preference=explicit)
