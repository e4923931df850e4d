"""The dashboard's words in English and Spanish, and the choice between them."""

from __future__ import annotations

from typing import Literal

__all__ = ["LANGUAGES", "Language", "pick_language", "text"]

Language = Literal["en", "es"]
LANGUAGES: tuple[Language, ...] = ("en", "es")

_TEXT: dict[str, tuple[str, str]] = {
    "title": ("Your memory", "Tu memoria"),
    "previous": ("Previous facts", "Hechos anteriores"),
    "next": ("More facts", "Más hechos"),
    "page": ("page {n} of {of}", "página {n} de {of}"),
    "role_user": ("You", "Tú"),
    "role_assistant": ("Assistant", "Asistente"),
    "chat_summary": ("Summary", "Resumen"),
    "switch": ("Memory switch", "Interruptor de memoria"),
    "is_on": ("Memory is on: new facts are stored.", "La memoria está activa: se guardan hechos nuevos."),
    "is_paused": (
        "Memory is paused: nothing new is stored; what is kept is still used.",
        "La memoria está en pausa: no se guarda nada nuevo; lo guardado se sigue usando.",
    ),
    "pause": ("Pause memory", "Pausar la memoria"),
    "resume": ("Resume memory", "Reanudar la memoria"),
    "paused": ("Memory paused.", "Memoria en pausa."),
    "resumed": ("Memory resumed.", "Memoria reanudada."),
    "scope_user": ("About you", "Sobre ti"),
    "sign_in": ("Sign in", "Iniciar sesión"),
    "token_label": ("Access token (your Supabase session's)", "Token de acceso (el de tu sesión de Supabase)"),
    "dev_title": ("Development sign-in", "Acceso de desarrollo"),
    "dev_note": (
        "Enabled on this server for local use only: it signs in as any user id.",
        "Activado en este servidor solo para uso local: entra como cualquier usuario.",
    ),
    "user_label": ("User id (UUID)", "Id de usuario (UUID)"),
    "sign_out": ("Sign out", "Cerrar sesión"),
    "signed_in_as": ("Signed in as", "Sesión de"),
    "bad_token": ("That token was not accepted: ", "Ese token no se aceptó: "),
    "expired": ("Your session ended; sign in again.", "Tu sesión terminó; vuelve a entrar."),
    "facts": ("Facts", "Hechos"),
    "no_facts": ("No facts stored.", "No hay hechos guardados."),
    "confidence": ("confidence", "confianza"),
    "source": ("source", "origen"),
    "explicit": ("you said it", "lo dijiste tú"),
    "inferred": ("inferred", "deducido"),
    "learned": ("learned", "aprendido"),
    "from_messages": ("from messages", "de los mensajes"),
    "session": ("session", "sesión"),
    "slot": ("slot", "campo"),
    "correct": ("Correct", "Corregir"),
    "correct_label": ("Corrected text", "Texto corregido"),
    "delete": ("Delete", "Borrar"),
    "history": ("Earlier versions", "Versiones anteriores"),
    "superseded": ("replaced", "sustituido"),
    "preferences": ("Preferences", "Preferencias"),
    "no_preferences": ("No preferences.", "No hay preferencias."),
    "other": ("Projects and patterns", "Proyectos y patrones"),
    "slots": ("Slots", "Campos"),
    "no_slots": ("No slots.", "No hay campos."),
    "summaries": ("Rolling summary", "Resumen continuo"),
    "no_summaries": ("No summary yet.", "Aún no hay resumen."),
    "version": ("version", "versión"),
    "chats": ("Chats", "Conversaciones"),
    "no_chats": ("No chats.", "No hay conversaciones."),
    "turns": ("turns", "turnos"),
    "untitled": ("(untitled)", "(sin título)"),
    "receipt": ("What the agent was given", "Lo que recibió el agente"),
    "no_receipt": ("No turn yet.", "Aún no hay turnos."),
    "turn_of": ("The turn of", "El turno del"),
    "past_turns": ("Past turns", "Turnos anteriores"),
    "facts_word": ("facts", "hechos"),
    "fact_deleted": ("(a fact deleted since)", "(un hecho borrado después)"),
    "reason_search": ("found for the message", "encontrado para el mensaje"),
    "reason_ranked": ("ranked", "por relevancia"),
    "reason_rejection": ("a rejection (always shown)", "un rechazo (siempre se muestra)"),
    "reason_slots": ("in the slots", "en los campos"),
    "injected": ("Facts shown", "Hechos mostrados"),
    "cut": ("Left out for the budget", "Omitidos por el presupuesto"),
    "tokens": ("Tokens per part", "Tokens por parte"),
    "export": ("Export everything (JSON)", "Exportar todo (JSON)"),
    "erase": ("Erase everything", "Borrarlo todo"),
    "erase_title": ("Erase all your memory", "Borrar toda tu memoria"),
    "erase_warning": (
        "This deletes every fact, preference, summary, chat and session stored about you. It cannot be undone:"
        " export first if you want a copy.",
        "Esto borra todos los hechos, preferencias, resúmenes, conversaciones y sesiones que se guardan sobre ti."
        " No se puede deshacer: exporta antes si quieres una copia.",
    ),
    "erase_confirm_label": ("Type ERASE to confirm", "Escribe BORRAR para confirmar"),
    "erase_word": ("ERASE", "BORRAR"),
    "erase_wrong": ("Type the word exactly to confirm.", "Escribe la palabra exacta para confirmar."),
    "erased": ("Everything was erased ({n} rows).", "Se borró todo ({n} filas)."),
    "cancel": ("Cancel", "Cancelar"),
    "corrected": (
        "Fact corrected; the old version is kept as history.",
        "Hecho corregido; la versión anterior queda en el historial.",
    ),
    "deleted": ("Fact deleted.", "Hecho borrado."),
    "not_found": ("Not found.", "No encontrado."),
    "back": ("Back to your memory", "Volver a tu memoria"),
    "language": ("Language", "Idioma"),
    "bad_form": ("The form expired; try again.", "El formulario caducó; inténtalo de nuevo."),
    "too_long": (
        "A fact holds at most {n} characters: shorten it.",
        "Un hecho tiene como máximo {n} caracteres: acórtalo.",
    ),
    "empty_text": ("Write the corrected text.", "Escribe el texto corregido."),
    "not_storable": (
        "That text holds only sensitive data and cannot be stored.",
        "Ese texto solo contiene datos sensibles y no se puede guardar.",
    ),
    "skip": ("Skip to content", "Saltar al contenido"),
}


def text(language: Language, key: str, **values: object) -> str:
    """The text of `key` in `language`, with `{name}` placeholders filled."""
    en, es = _TEXT[key]
    chosen = es if language == "es" else en
    return chosen.format(**values) if values else chosen


def pick_language(choice: str | None, accept_language: str | None) -> Language:
    """The chosen language (a cookie), else the first of Accept-Language's that the dashboard speaks, else English."""
    if choice in LANGUAGES:
        return "es" if choice == "es" else "en"
    for part in (accept_language or "").split(","):
        tag = part.split(";")[0].strip().lower()[:2]
        if tag == "es":
            return "es"
        if tag == "en":
            return "en"
    return "en"
