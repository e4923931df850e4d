"""The sensitive-data filter: what must never reach long-term memory, and the look-alikes that must."""

from __future__ import annotations

import pytest

from memory_plugin.privacy import Redaction, contains_sensitive, redact_sensitive


@pytest.mark.parametrize(
    ("text", "expected", "kind"),
    [
        (
            "Podéis cobrar el pedido en mi Visa 4111 1111 1111 1111, gracias",
            "Podéis cobrar el pedido en mi Visa [redacted payment_card], gracias",
            "payment_card",
        ),
        (
            "Charge it to card 4539-1488-0343-6467 as usual.",
            "Charge it to card [redacted payment_card] as usual.",
            "payment_card",
        ),
        ("La tarjeta es 4539148803436467", "La tarjeta es [redacted payment_card]", "payment_card"),
        (
            "Transferid a ES91 2100 0418 4502 0005 1332 cuando esté listo",
            "Transferid a [redacted iban] cuando esté listo",
            "iban",
        ),
        ("Our IBAN: ES9121000418450200051332.", "Our IBAN: [redacted iban].", "iban"),
        ("Mi DNI es 12345678Z para la factura", "Mi DNI es [redacted national_id] para la factura", "national_id"),
        ("Factura a nombre de NIE X1234567L", "Factura a nombre de NIE [redacted national_id]", "national_id"),
        ("My SSN is 123-45-6789.", "My SSN is [redacted ssn].", "ssn"),
        ("Mi contraseña es hunter2", "Mi contraseña es [redacted password]", "password"),
        (
            "La clave del portal de proveedores es Portal2024!",
            "La clave del portal de proveedores es [redacted password]",
            "password",
        ),
        ("ERP password: hunter2.", "ERP password: [redacted password].", "password"),
        ("my password is Tr0ub4dor", "my password is [redacted password]", "password"),
        (
            "Usa mi key sk-proj-4fG7hJ2kL9mN3pQ8rS1tV6wX0yZ5aB para las pruebas",
            "Usa mi key [redacted api_key] para las pruebas",
            "api_key",
        ),
        (
            "The AWS key id is AKIAIOSFODNN7EXAMPLE",
            "The AWS key id is [redacted api_key]",
            "api_key",
        ),
        (
            "token: ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
            "token: [redacted api_key]",
            "api_key",
        ),
        (
            "la clave api es Zx8kq2LmP9vR4tYw7NcB3hJd5F",
            "la clave api es [redacted api_key]",
            "api_key",
        ),
    ],
)
def test_sensitive_data_is_replaced_by_a_placeholder(text: str, expected: str, kind: str) -> None:
    redaction = redact_sensitive(text)
    assert redaction == Redaction(text=expected, kinds=(kind,))
    assert contains_sensitive(text)


@pytest.mark.parametrize(
    "text",
    [
        "El número de pieza 4111-1111-1111-1112 está en stock",  # fails Luhn: a part number, not a card
        "Pedido 1234567890123456 confirmado",  # long number failing Luhn
        "Plano PN 7075-T6-0042, revisión B",
        "Necesito tolerancia ±0.05mm en los taladros",
        "Entrega prevista el 2025-03-15 o el 15/03/2025",
        "Son 1500 piezas a 12,50 € la unidad",
        "I can't exceed $2,000 for the batch",
        "IBAN ES92 2100 0418 4502 0005 1332",  # wrong check digits
        "DNI 12345678A",  # wrong control letter (12345678 → Z)
        "Quiero 12345678 y 5 más",  # "y" is the Spanish "and", not a control letter
        "Certificación ISO 9001 y acero AISI 316L",
        "La clave es el acabado superficial",  # "clave" meaning "the key point"
        "La contraseña es incorrecta, no puedo entrar al portal",
        "The key is to keep every tolerance under ±0.01 mm",
        "El pin es de acero templado",  # a mechanical pin
        "Llamadme al +34 612 345 678",
    ],
)
def test_near_misses_pass_unchanged(text: str) -> None:
    assert redact_sensitive(text) == Redaction(text=text, kinds=())
    assert not contains_sensitive(text)


def test_several_kinds_in_one_text_are_all_redacted_and_reported_once_each() -> None:
    text = (
        "Paga con 4111 1111 1111 1111 o con 4539 1488 0343 6467; IBAN ES91 2100 0418 4502 0005 1332; "
        "mi contraseña es hunter2"
    )
    redaction = redact_sensitive(text)
    assert redaction.text == (
        "Paga con [redacted payment_card] o con [redacted payment_card]; IBAN [redacted iban]; "
        "mi contraseña es [redacted password]"
    )
    assert sorted(redaction.kinds) == ["iban", "password", "payment_card"]


def test_the_iban_is_not_mistaken_for_a_card_and_following_words_survive() -> None:
    redaction = redact_sensitive("Cuenta ES91 2100 0418 4502 0005 1332 EUR, titular ACME")
    assert redaction.text == "Cuenta [redacted iban] EUR, titular ACME"
    assert redaction.kinds == ("iban",)


def test_a_card_next_to_other_numbers_is_still_found() -> None:
    redaction = redact_sensitive("Ref 12 4111 1111 1111 1111 caduca 2027")
    assert redaction.text == "Ref 12 [redacted payment_card] caduca 2027"


def test_a_password_that_is_an_api_key_is_reported_as_an_api_key_only() -> None:
    redaction = redact_sensitive("my password is sk-proj-4fG7hJ2kL9mN3pQ8rS1tV6wX0yZ5aB")
    assert redaction == Redaction(text="my password is [redacted api_key]", kinds=("api_key",))


def test_jwt_looking_supabase_key_is_redacted() -> None:
    jwt = (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJyb2xlIjoic2VydmljZV9yb2xlIn0."
        "dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    )
    assert redact_sensitive(f"service key {jwt} en el .env").text == "service key [redacted api_key] en el .env"


def test_ssn_with_an_area_never_issued_is_not_an_ssn() -> None:
    assert not contains_sensitive("ticket 666-45-6789")
    assert not contains_sensitive("ticket 900-12-3456")
