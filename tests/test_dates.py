"""Relative dates are resolved against the message's time, in Spanish and English, without a model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from memory_plugin.dates import resolve_relative_dates

MONDAY = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)  # Monday 23 November 2026
SATURDAY = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Viaja el próximo viernes", "Viaja el viernes 2026-11-27"),
        ("Viaja el viernes que viene", "Viaja el viernes 2026-11-27"),
        ("Mañana recoge las piezas", "El 2026-11-24 recoge las piezas"),
        ("Pasado mañana tiene auditoría", "El 2026-11-25 tiene auditoría"),
        ("La entrega llegó ayer con rebabas", "La entrega llegó el 2026-11-22 con rebabas"),
        (
            "Opinión: el lote de la semana pasada llegó tarde",
            "Opinión: el lote de la semana del 2026-11-16 llegó tarde",
        ),
        ("Estará fuera este fin de semana", "Estará fuera el fin de semana del 2026-11-28"),
        ("Visitará el taller la semana que viene", "Visitará el taller la semana del 2026-11-30"),
        ("Necesita las piezas dentro de 3 días", "Necesita las piezas el 2026-11-26"),
        ("Cambia de proveedor dentro de dos semanas", "Cambia de proveedor hacia el 2026-12-07"),
        ("Pidió muestras hace un mes", "Pidió muestras hacia el 2026-10-23"),
        ("La factura del mes pasado", "La factura de octubre de 2026"),
        ("Amplía la planta el mes que viene", "Amplía la planta en diciembre de 2026"),
        ("El viernes pasado llegó el pedido", "El viernes 2026-11-20 llegó el pedido"),
        ("Travels next Friday", "Travels on Friday 2026-11-27"),
        ("Needs the parts by next Friday", "Needs the parts by Friday 2026-11-27"),
        ("The batch arrived last week with burrs", "The batch arrived the week of 2026-11-16 with burrs"),
        ("Will be away this weekend", "Will be away the weekend of 2026-11-28"),
        ("Needs a second batch in two weeks", "Needs a second batch around 2026-12-07"),
        ("Audit tomorrow", "Audit on 2026-11-24"),
        ("Sent the drawings 3 days ago", "Sent the drawings on 2026-11-20"),
        ("Moves to the new plant next month", "Moves to the new plant in December 2026"),
    ],
)
def test_relative_dates_become_absolute(text: str, expected: str) -> None:
    assert resolve_relative_dates(text, MONDAY).text == expected


@pytest.mark.parametrize(
    "text",
    [
        "Prefiere entregas por la mañana",  # the morning, not tomorrow
        "Las mañanas no puede atender llamadas",
        "Hoy en día trabaja solo con 7075",  # nowadays
        "Los viernes no recibe mercancía",  # a routine, not a date
        "On Fridays the dock is closed",
        "Plazo de entrega en 3 días",  # a lead time, not a date
        "Requiere tolerancia de ±0.05 mm",
        "Pedido 2026-11-27 confirmado",  # already absolute
    ],
)
def test_text_without_relative_dates_is_unchanged(text: str) -> None:
    result = resolve_relative_dates(text, MONDAY)
    assert result.text == text
    assert not result.changed


def test_resolving_is_idempotent() -> None:
    once = resolve_relative_dates("Estará fuera este fin de semana y vuelve el próximo lunes", MONDAY)
    twice = resolve_relative_dates(once.text, MONDAY + timedelta(days=30))
    assert once.text == "Estará fuera el fin de semana del 2026-11-28 y vuelve el lunes 2026-11-30"
    assert twice.text == once.text
    # The whole weekend is still known from the rendered text: the expiry does not shrink to one day.
    assert twice.expires_at(MONDAY) == once.expires_at(MONDAY) == datetime(2026, 12, 1, tzinfo=UTC)


def test_weekends_and_weekdays_counted_from_a_saturday() -> None:
    assert resolve_relative_dates("este fin de semana", SATURDAY).text == "el fin de semana del 2026-11-28"
    assert resolve_relative_dates("el próximo fin de semana", SATURDAY).text == "el fin de semana del 2026-12-05"
    assert resolve_relative_dates("next weekend", SATURDAY).text == "the weekend of 2026-12-05"
    assert resolve_relative_dates("el próximo sábado", SATURDAY).text == "el sábado 2026-12-05"
    assert resolve_relative_dates("este sábado", SATURDAY).text == "el sábado 2026-11-28"


def test_the_message_timezone_decides_the_day() -> None:
    madrid = timezone(timedelta(hours=1))
    late_sunday_utc = datetime(2026, 11, 22, 23, 30, tzinfo=UTC)  # already Monday in Madrid
    assert resolve_relative_dates("mañana", late_sunday_utc).text == "el 2026-11-23"
    assert resolve_relative_dates("mañana", late_sunday_utc.astimezone(madrid)).text == "el 2026-11-24"


def test_only_future_dates_make_a_statement_expire() -> None:
    trip = resolve_relative_dates("Estará fuera este fin de semana", MONDAY)
    assert trip.expires_at(MONDAY) == datetime(2026, 11, 30, tzinfo=UTC)  # after Sunday 29
    deadline = resolve_relative_dates("Needs the parts by next Friday", MONDAY)
    assert deadline.expires_at(MONDAY) == datetime(2026, 11, 28, tzinfo=UTC)
    past = resolve_relative_dates("La entrega de la semana pasada llegó tarde", MONDAY)
    assert past.expires_at(MONDAY) is None  # history does not expire
    lasting = resolve_relative_dates("Prefiere aluminio 7075", MONDAY)
    assert lasting.expires_at(MONDAY) is None
    mixed = resolve_relative_dates("Ayer confirmó que viaja mañana", MONDAY)
    assert mixed.expires_at(MONDAY) is None  # part of it is already history
