"""The scripted 200-turn conversation `bench/quality.py` replays: who says what, when, and which facts each
turn states (`Fact`: a canonical content, its category, what it supersedes)."""

from __future__ import annotations

from dataclasses import dataclass

from memory_plugin.models import FactCategory


@dataclass(frozen=True, slots=True)
class Fact:
    """A fact the user states in a turn, as the scripted model returns it."""

    fid: str
    """Scripted fact id: the same for repeats and paraphrases of one fact."""
    content: str
    category: FactCategory
    supersedes: str | None = None
    """The scripted fact id this one replaces (a changed budget, a material no longer used)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn."""

    text: str
    facts: tuple[Fact, ...] = ()
    end_of_request: bool = False
    """The user confirms the request (the workflow's `request_complete`)."""


def _t(text: str, *facts: Fact, end: bool = False) -> Turn:
    return Turn(text, facts, end)


B1 = Fact("budget", "No puede superar 1000 € por pedido", "constraint")
B2 = Fact("budget2", "No puede superar 2000 € por pedido", "constraint", supersedes="budget")
B3 = Fact("budget3", "Budget is capped at 2500 EUR per order", "constraint", supersedes="budget2")
M1 = Fact("mat7075", "Prefiere aluminio 7075 para prototipos", "preference")
M1_PARA = Fact("mat7075", "Prefiere el 7075 para los prototipos", "preference")
M2 = Fact("mat6082", "Prefiere aluminio 6082 para prototipos", "preference", supersedes="mat7075")
CERT = Fact("cert31", "Requiere certificado de material EN 10204 3.1", "requirement")
CERT_PARA = Fact("cert31", "Necesita el certificado 3.1 de material en todos los pedidos", "requirement")
CERT_EN = Fact("cert31", "Requires EN 10204 3.1 material certificates", "requirement")
ISO = Fact("iso9001", "Requiere certificación ISO 9001", "requirement")
TOL = Fact("tol", "Necesita tolerancias de ±0.02 mm en ejes", "requirement")
ANOD = Fact("anod", "Prefiere anodizado negro", "preference")
ANOD_EN = Fact("anod", "Prefers black anodizing", "preference")
REJ_1045 = Fact("rej1045", "No quiere que le sugieran acero 1045", "rejection")
REJ_1045_PARA = Fact("rej1045", "No le sugieran acero 1045", "rejection")
REJ_POWDER = Fact("rejpowder", "Do not suggest powder coating", "rejection")
DELIV_FRI = Fact("delivfri", "Recibe entregas solo los viernes por la mañana", "routine")
DELIV_MON = Fact("delivmon", "Recibe entregas solo los lunes por la mañana", "routine", supersedes="delivfri")
BUYER_1 = Fact("buyer", "Su responsable de compras es Marta Ruiz", "contact")
BUYER_2 = Fact("buyer2", "Their buyer is John Smith", "contact", supersedes="buyer")
GOAL = Fact("goal", "Objetivo: pasar a producción en serie en 2027", "goal")
LATE = Fact("late", "Opinión: la entrega de la semana pasada llegó tarde", "feedback")
AERO = Fact("aero", "Trabaja en el sector aeroespacial", "fact")
AWAY_1 = Fact("away1", "Estará fuera este fin de semana", "fact")
AWAY_2 = Fact("away2", "Will be away next week", "fact")
CARD = Fact("card", "Paga con la tarjeta 4111 1111 1111 1111", "fact")
HEALTH = Fact("health", "Tiene diabetes y no puede tener reuniones a primera hora", "fact")
QTY = Fact("qty", "Suele pedir lotes de 50 a 200 piezas", "fact")

_SMALL_TALK_ES = ("Hola", "Gracias", "Vale, perfecto", "¡Genial!", "Buenos días", "Ok", "Muchas gracias")
_SMALL_TALK_EN = ("Hi", "Thanks", "Great, thanks", "Ok", "Perfect")
_DETAILS_ES = (
    "Serán {n} piezas",
    "¿Podéis hacerlo en {n} días laborables?",
    "Te paso el plano en STEP, revisión {n}",
    "El diámetro exterior es de {n} mm",
    "¿Qué acabado superficial me recomiendas para {n} unidades?",
    "Mejor {n} unidades, no más",
    "¿Cuánto costaría subir a {n} piezas?",
    "La rosca es M{n}",
)
_DETAILS_EN = (
    "It would be {n} parts",
    "Could you quote {n} units as well?",
    "Drawing revision {n} attached",
    "Outer diameter is {n} mm",
    "What lead time for {n} pieces?",
)
_CONFIRM_ES = "Perfecto, lo confirmo, adelante con el pedido"
_CONFIRM_EN = "Confirmed, please go ahead"

# Twelve sessions: (days before now, language, the turns that carry facts). Filler turns (quantities,
# drawings, questions, small talk) are added deterministically so that the conversation has 200 user turns.
_SESSIONS: tuple[tuple[int, str, tuple[Turn, ...]], ...] = (
    (
        40,
        "es",
        (
            _t("Hola, necesito presupuesto para 80 soportes. Prefiero aluminio 7075 para prototipos.", M1),
            _t("Trabajamos en el sector aeroespacial, así que siempre pedimos certificado 3.1.", AERO, CERT),
            _t("No podemos superar 1000 € por pedido.", B1),
            _t("Recuerda: no me sugieras acero 1045, nos dio problemas.", REJ_1045),
        ),
    ),
    (
        37,
        "es",
        (
            _t("Estaré fuera este fin de semana, contesto el lunes.", AWAY_1),
            _t("Necesitamos tolerancias de ±0.02 mm en los ejes.", TOL),
            _t("Para los pagos, cobrad a la tarjeta 4111 1111 1111 1111.", CARD),
        ),
    ),
    (
        34,
        "es",
        (
            _t("Como siempre, prefiero el 7075 para los prototipos.", M1_PARA),
            _t("Recibimos entregas solo los viernes por la mañana.", DELIV_FRI),
            _t("Nuestra responsable de compras es Marta Ruiz.", BUYER_1),
        ),
    ),
    (
        30,
        "es",
        (
            _t("Ojo, la entrega de la semana pasada llegó tarde.", LATE),
            _t("Necesitamos certificación ISO 9001 en todo.", ISO),
            _t("Recuerda que no me sugieras acero 1045.", REJ_1045_PARA),
        ),
    ),
    (
        27,
        "es",
        (
            _t("A partir de ahora el presupuesto es de 2000 € por pedido.", B2),
            _t("Prefiero anodizado negro para estas piezas.", ANOD),
            _t("Nuestro objetivo es pasar a producción en serie en 2027.", GOAL),
        ),
    ),
    (
        23,
        "es",
        (
            _t("Tengo diabetes y no puedo tener reuniones a primera hora, mejor por la tarde.", HEALTH),
            _t("Necesitamos el certificado 3.1 de material en todos los pedidos.", CERT_PARA),
            _t("Solemos pedir lotes de 50 a 200 piezas.", QTY),
        ),
    ),
    (
        20,
        "es",
        (
            _t("Ya no usamos 7075: ahora preferimos aluminio 6082 para prototipos.", M2),
            _t("No podemos superar 2000 € por pedido, como te dije.", B2),
        ),
    ),
    (
        16,
        "es",
        (
            _t("A partir de ahora recibimos entregas solo los lunes por la mañana.", DELIV_MON),
            _t("Prefiero anodizado negro, como siempre.", ANOD),
        ),
    ),
    (
        13,
        "en",
        (
            _t("Hi, I'm the new engineer. Remember we require EN 10204 3.1 material certificates.", CERT_EN),
            _t("Please don't suggest powder coating, our customer rejects it.", REJ_POWDER),
        ),
    ),
    (
        9,
        "en",
        (
            _t("From now on our buyer is John Smith.", BUYER_2),
            _t("We prefer black anodizing on all housings.", ANOD_EN),
        ),
    ),
    (
        5,
        "en",
        (
            _t("Going forward the budget is capped at 2500 EUR per order.", B3),
            _t("Don't suggest powder coating again, please.", REJ_POWDER),
        ),
    ),
    (
        1,
        "en",
        (
            _t("I'll be away next week, John will handle the order.", AWAY_2),
            _t("We require EN 10204 3.1 material certificates, as always.", CERT_EN),
        ),
    ),
)
TOTAL_TURNS = 200


def _build_script() -> list[tuple[int, list[Turn]]]:
    """The sessions with filler turns interleaved, 200 user turns in all, every session ending confirmed."""
    keyed = sum(len(turns) for _, _, turns in _SESSIONS)
    fillers = TOTAL_TURNS - keyed - len(_SESSIONS)  # one confirmation per session
    per_session = [
        fillers // len(_SESSIONS) + (1 if i < fillers % len(_SESSIONS) else 0) for i in range(len(_SESSIONS))
    ]
    script: list[tuple[int, list[Turn]]] = []
    counter = 0
    for (days_ago, lang, turns), n_fill in zip(_SESSIONS, per_session, strict=True):
        small = _SMALL_TALK_ES if lang == "es" else _SMALL_TALK_EN
        details = _DETAILS_ES if lang == "es" else _DETAILS_EN
        filler: list[Turn] = []
        for _ in range(n_fill):
            counter += 1
            # About one filler in three is small talk, the rest request details.
            if counter % 3 == 0:
                filler.append(Turn(small[counter % len(small)]))
            else:
                filler.append(Turn(details[counter % len(details)].format(n=10 + (counter * 7) % 190)))
        session: list[Turn] = [filler.pop(0)] if filler else []  # a greeting or a detail opens the session
        gap = max(1, len(filler) // max(1, len(turns)))
        for turn in turns:
            session.append(turn)
            session.extend(filler[:gap])
            del filler[:gap]
        session.extend(filler)
        session.append(Turn(_CONFIRM_ES if lang == "es" else _CONFIRM_EN, end_of_request=True))
        script.append((days_ago, session))
    assert sum(len(s) for _, s in script) == TOTAL_TURNS
    return script


SCRIPT = _build_script()
"""The conversation: (days before now, the session's user turns)."""
