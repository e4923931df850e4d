"""Human names, in English and Spanish, for the names the dashboard shows that are stored as identifiers: fact
categories, preference fields, slot fields, kinds of row, fact slots (`material:7075`), summary kinds and the
parts of a receipt's token count. A name not listed (a vocabulary's own) is shown with its underscores as spaces.
"""

from __future__ import annotations

from .strings import Language

__all__ = ["LABELS", "label"]

LABELS: dict[str, dict[str, tuple[str, str]]] = {
    # Fact categories (memory_plugin.taxonomy).
    "category": {
        "preference": ("Preference", "Preferencia"),
        "requirement": ("Requirement", "Requisito"),
        "constraint": ("Limit", "Límite"),
        "feedback": ("Opinion of past work", "Opinión sobre trabajos anteriores"),
        "rejection": ("Do not suggest", "No sugerir"),
        "goal": ("Goal", "Objetivo"),
        "routine": ("Routine", "Rutina"),
        "contact": ("Contact", "Contacto"),
        "health_note": ("Health note", "Nota de salud"),
        "fact": ("Fact", "Dato"),
        # Preference rows: the field of the user's preferences they fill.
        "preferred_materials": ("Preferred materials", "Materiales preferidos"),
        "typical_quantities": ("Typical quantities", "Cantidades habituales"),
        "communication_style": ("Communication style", "Estilo de comunicación"),
        "industry": ("Industry", "Sector"),
        "location": ("Location", "Ubicación"),
        "project": ("Project", "Proyecto"),
        "pattern": ("Frequent request", "Petición frecuente"),
    },
    # Fields of the slot document (memory_plugin.context.slots.SlotField).
    "slot_field": {
        "profile": ("Profile", "Perfil"),
        "about": ("About you", "Sobre ti"),
        "goal": ("Goal", "Objetivo"),
        "constraints": ("Limits and requirements", "Límites y requisitos"),
        "rejections": ("Do not suggest", "No sugerir"),
        "preferences": ("Preferences", "Preferencias"),
        "schedule": ("Schedule", "Horario"),
        "targets": ("Targets", "Metas"),
        "reminder_pref": ("Reminders", "Recordatorios"),
        "progress_markers": ("Progress", "Progreso"),
    },
    # A fact's slot (memory_plugin.quality.slots): one current value per user.
    "fact_slot": {
        "budget": ("budget", "presupuesto"),
        "lead_time": ("lead time", "plazo de entrega"),
        "material": ("material", "material"),
    },
    "summary_kind": {
        "model": ("written by the model", "escrito por el modelo"),
        "extractive": ("extracted from the messages", "extraído de los mensajes"),
    },
    # Parts of a search score (memory_plugin.retrieval.scored.ScoreComponents).
    "score_part": {
        "text": ("words", "palabras"),
        "vector": ("meaning", "significado"),
        "neighbour": ("nearby in the conversation", "cerca en la conversación"),
        "trigram": ("spelling", "escritura"),
        "speaker": ("speaker", "hablante"),
        "date": ("date", "fecha"),
        "time": ("time", "hora"),
        "importance": ("importance", "importancia"),
        "confidence": ("confidence", "confianza"),
        "recency": ("recency", "actualidad"),
        "session": ("same conversation", "misma conversación"),
        "adjacent": ("next turn", "turno contiguo"),
        "entity": ("names in the message", "nombres del mensaje"),
    },
    # Parts of a receipt's token count (ContextReceipt.tokens).
    "token_part": {
        "profile": ("profile", "perfil"),
        "slots": ("slots", "campos"),
        "summary": ("summary", "resumen"),
        "facts": ("facts", "hechos"),
        "rejections": ("rejections", "rechazos"),
        "frame": ("framing", "marco"),
        "messages": ("messages", "mensajes"),
        "prompt": ("the message", "el mensaje"),
        "total": ("total", "total"),
    },
}
"""group -> stored name -> (English, Spanish)."""


def label(language: Language, group: str, name: object) -> str:
    """The human name of `name` in `group` (`material:7075` → "material 7075"); unknown names with their
    underscores as spaces."""
    raw = str(name)
    head, sep, tail = raw.partition(":")
    known = LABELS.get(group, {}).get(head if sep else raw)
    if known is None:
        return raw.replace("_", " ")
    chosen = known[1] if language == "es" else known[0]
    return f"{chosen} {tail}" if sep else chosen
