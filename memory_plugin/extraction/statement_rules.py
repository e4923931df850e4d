"""The statement shapes `RuleBasedExtractor` (`rules.py`) recognises: one `StatementRule` per shape (a trigger
regex, the fact's category, and the third-person template its object is written into), in Spanish and English,
checked in table order at the same position (`STATEMENT_RULES`). Pure data and regexes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..models import FactCategory

__all__ = ["STATEMENT_RULES", "StatementRule"]


@dataclass(frozen=True, slots=True)
class StatementRule:
    """One statement shape: a trigger regex and how to rewrite what follows it."""

    trigger: re.Pattern[str]
    category: FactCategory
    template: str
    """Canonical third-person content; `{}` is the captured object."""
    certification_template: str | None = None
    """Used instead of `template` when the object is a certification: "necesitamos certificación ISO 9001" and
    "requerimos certificación ISO 9001" become the same fact, "Requiere certificación ISO 9001"."""
    one_off_check: bool = False
    """Reject objects that are requests of this conversation (quotes, quantities), not lasting needs."""
    feedback: bool = False
    """Feedback keeps the whole clause ("Opinión: la última entrega llegó tarde") instead of object only."""
    time_object: bool = False
    """The object is a time ("este fin de semana", "next week"), so demonstratives are not pointers into the
    conversation."""


def _t(pattern: str) -> re.Pattern[str]:
    """A trigger: whole words only ("prefer" must not match "preferred"), plus the spaces after it."""
    return re.compile(r"\b" + pattern + r"\b\s*", re.IGNORECASE)


# English statements start with the subject, optionally followed by an adverb: "we really need", "I also prefer".
_EN_SUBJECT = (
    r"\b(?:I|we)\s+(?:(?:always|usually|generally|really|also|definitely|still|normally|typically|mostly)\s+)?"
)
_FEEDBACK_SUBJECT_ES = r"\b(?:la|el|las|los|vuestr[oa]s?|su|sus|tu|tus)\s+(?:[\w-]+\s+){0,4}?"
_FEEDBACK_SUBJECT_EN = r"\b(?:the|your|our)\s+(?:[\w-]+\s+){0,4}?"

# Checked in this order at the same position; the earliest match in a statement wins.
STATEMENT_RULES: tuple[StatementRule, ...] = (
    # --- Spanish ---
    StatementRule(
        _t(r"(?:siempre\s+(?:trabajo|trabajamos)|(?:trabajo|trabajamos)\s+siempre)\s+con"),
        "preference",
        "Siempre trabaja con {}",
    ),
    StatementRule(
        _t(
            r"(?:siempre\s+(?:uso|usamos|utilizo|utilizamos|empleo|empleamos)|(?:uso|usamos|utilizo|utilizamos)"
            r"\s+siempre)"
        ),
        "preference",
        "Siempre usa {}",
    ),
    StatementRule(_t(r"(?:prefiero|preferimos)"), "preference", "Prefiere {}"),
    StatementRule(
        _t(r"(?:mi|nuestr[oa])\s+\w+\s+(?:preferid[oa]|favorit[oa])\s+(?:es|son)"), "preference", "Prefiere {}"
    ),
    StatementRule(_t(r"(?:necesito|necesitamos)"), "requirement", "Necesita {}", "Requiere {}", one_off_check=True),
    StatementRule(_t(r"(?:requiero|requerimos|exijo|exigimos)"), "requirement", "Requiere {}", one_off_check=True),
    StatementRule(
        _t(
            r"no\s+(?:puedo|podemos)\s+(?:superar|exceder|sobrepasar|rebasar|pasar(?:me|nos)?\s+de"
            r"|gastar\s+m[aá]s\s+de)"
        ),
        "constraint",
        "No puede superar {}",
    ),
    StatementRule(
        _t(
            r"(?:mi|nuestro|el)\s+presupuesto\s+(?:m[aá]ximo\s+(?:es|son)|(?:es|est[aá])\s+(?:limitado|restringido)"
            r"\s+a|no\s+(?:puede\s+)?(?:superar?|exceder?|pasar?\s+de)|tiene\s+un\s+(?:tope|l[ií]mite)\s+de"
            r"|es\s+como\s+m[aá]ximo|es\s+de\s+(?:como\s+)?m[aá]ximo)(?:\s+de)?"
        ),
        "constraint",
        "No puede superar {}",
    ),
    StatementRule(
        _t(r"(?:mi|nuestro)\s+presupuesto\s+(?:es|ser[aá])(?:\s+de)?"), "constraint", "Su presupuesto es de {}"
    ),
    StatementRule(
        re.compile(
            _FEEDBACK_SUBJECT_ES + r"(?:lleg[oó]|llegaron|vino|vinieron|fue|fueron|estuvo|estuvieron|sali[oó]"
            r"|salieron|ten[ií]a|ten[ií]an|tuvo|tuvieron|estaba|estaban|era|eran|qued[oó]|quedaron)\b\s*",
            re.IGNORECASE,
        ),
        "feedback",
        "Opinión: {}",
        feedback=True,
    ),
    StatementRule(
        _t(
            r"(?:no|nunca|jam[aá]s)\s+(?:me|nos)\s+(?:vuelvas\s+a\s+|volváis\s+a\s+)?(?:sugieras|sugiráis|sugieran|recomiendes"
            r"|recomendéis|recomienden|ofrezcas|ofrezcáis|ofrezcan|propongas|propongáis|propongan)(?:\s+m[aá]s)?"
        ),
        "rejection",
        "No quiere que le sugieran {}",
    ),
    StatementRule(
        _t(r"ya\s+no\s+(?:uso|usamos|utilizo|utilizamos|trabajo\s+con|trabajamos\s+con|compro|compramos)"),
        "preference",
        "Ya no usa {}",
    ),
    StatementRule(_t(r"(?:mi|nuestro)\s+objetivo\s+(?:es|ser[aá])"), "goal", "Objetivo: {}"),
    StatementRule(
        _t(r"(?:mi|nuestr[oa])\s+(?:responsable|jef[ea])\s+de\s+compras\s+(?:es|será)"),
        "contact",
        "Su responsable de compras es {}",
    ),
    StatementRule(
        _t(r"(?:mi|nuestr[oa])\s+(?:persona\s+de\s+)?contacto\s+(?:es|será)"), "contact", "Su contacto es {}"
    ),
    # Temporary absences: the object carries the time ("este fin de semana"), which the manager resolves to
    # absolute dates and turns into an expiry.
    StatementRule(
        _t(r"(?:estar[ée]|estaremos|estoy|estamos)\s+(?:fuera|de\s+viaje|de\s+vacaciones|ausentes?)"),
        "fact",
        "Estará fuera {}",
        time_object=True,
    ),
    # --- English ---
    StatementRule(
        _t(r"(?:don't|don’t|do\s+not|never)\s+(?:suggest|recommend|offer|propose)(?:\s+(?:me|us))?(?:\s+again)?"),
        "rejection",
        "Do not suggest {}",
    ),
    StatementRule(_t(r"(?:I|we)\s+no\s+longer\s+(?:use|work\s+with|buy|order)"), "preference", "No longer uses {}"),
    StatementRule(_t(r"(?:my|our)\s+(?:main\s+)?goal\s+is(?:\s+to)?"), "goal", "Goal: {}"),
    StatementRule(
        _t(r"(?:my|our)\s+(?:buyer|purchasing\s+manager|procurement\s+contact)\s+is"), "contact", "Their buyer is {}"
    ),
    StatementRule(_t(r"(?:my|our)\s+(?:main\s+)?contact(?:\s+person)?\s+is"), "contact", "Their contact is {}"),
    StatementRule(
        _t(
            r"(?:I'll|I’ll|I\s+will|we'll|we’ll|we\s+will|I'm|I’m|I\s+am|we're|we’re|we\s+are)\s+(?:be\s+)?"
            r"(?:away|out\s+of\s+(?:the\s+)?office|on\s+(?:vacation|holiday)|travel(?:l)?ing)"
        ),
        "fact",
        "Will be away {}",
        time_object=True,
    ),
    StatementRule(_t(r"(?:I|we)\s+always\s+work\s+with"), "preference", "Always works with {}"),
    StatementRule(_t(r"(?:I|we)\s+always\s+(?:use|go\s+with|order)"), "preference", "Always uses {}"),
    StatementRule(_t(_EN_SUBJECT + r"prefer"), "preference", "Prefers {}"),
    StatementRule(_t(r"(?:my|our)\s+(?:preferred|favou?rite)\s+\w+\s+(?:is|are)"), "preference", "Prefers {}"),
    StatementRule(_t(_EN_SUBJECT + r"need"), "requirement", "Needs {}", "Requires {}", one_off_check=True),
    StatementRule(_t(_EN_SUBJECT + r"require"), "requirement", "Requires {}", one_off_check=True),
    StatementRule(
        _t(
            r"(?:I|we)\s+(?:can't|can’t|cannot|can\s+not|(?:am|are)\s+not\s+able\s+to)\s+(?:exceed"
            r"|go\s+(?:over|above|beyond)|spend\s+more\s+than|pay\s+more\s+than)"
        ),
        "constraint",
        "Cannot exceed {}",
    ),
    StatementRule(
        _t(
            r"(?:my|our|the)\s+(?:(?:maximum|max|total)\s+)?budget\s+(?:is\s+(?:limited|capped|restricted)"
            r"\s+(?:to|at)|(?:can't|can’t|cannot)\s+(?:exceed|go\s+over)|is\s+(?:at\s+most|a\s+maximum\s+of"
            r"|no\s+more\s+than))"
        ),
        "constraint",
        "Cannot exceed {}",
    ),
    StatementRule(_t(r"(?:my|our|the)\s+(?:maximum|max)\s+budget\s+is"), "constraint", "Cannot exceed {}"),
    # A budget stated plainly ("my budget is 2000 EUR") is a limit, in words the `budget` slot recognises.
    StatementRule(
        _t(r"(?:my|our)\s+(?:total\s+)?budget\s+(?:is|will\s+be)(?:\s+(?:about|around))?"),
        "constraint",
        "Their budget is {}",
    ),
    StatementRule(
        re.compile(_FEEDBACK_SUBJECT_EN + r"(?:arrived|was|were|came|had|looked|turned\s+out|showed\s+up)\b\s*", re.I),
        "feedback",
        "Feedback: {}",
        feedback=True,
    ),
)
