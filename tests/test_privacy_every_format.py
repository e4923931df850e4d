"""Every secret format is caught, in the filter and on the real write path: content, metadata, speaker, the
search table, the outage journal, job payloads and logs.

Each format is written the way people paste it, with the fragment that must never be stored."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from memory_plugin import MemoryManager, MemorySettings, PostgresStore, ResilientStore
from memory_plugin.background import PostgresJobQueue
from memory_plugin.models import Message
from memory_plugin.outage import WriteJournal
from memory_plugin.privacy import redact_json_value, redact_note_text, redact_sensitive

# (format, text as written, the raw fragment that must not survive)
SECRETS: list[tuple[str, str, str]] = [
    ("visa spaced", "card 4111 1111 1111 1111", "1111 1111"),
    ("mastercard dashes", "card 5555-5555-5555-4444", "5555-5555"),
    ("amex", "amex 3782 822463 10005", "822463"),
    ("amex dashes", "amex 3782-822463-10005", "822463"),
    ("visa 13 digits", "old card 4222222222222", "4222222222222"),
    ("diners", "diners 3056 930902 5904", "930902"),
    ("maestro 19", "maestro 6759 6498 2643 8453 007", "6498 2643"),
    ("iban es", "IBAN ES91 2100 0418 4502 0005 1332", "2100 0418"),
    ("iban fr", "IBAN FR76 3000 6000 0112 3456 7890 189", "3456 7890"),
    ("iban gb", "GB29 NWBK 6016 1331 9268 19", "NWBK"),
    ("iban it", "IT60 X054 2811 1010 0000 0123 456", "X054"),
    ("iban nl", "NL91ABNA0417164300", "ABNA0417"),
    ("iban de", "Konto DE89 3704 0044 0532 0130 00", "3704 0044"),
    ("dni", "DNI 12345678Z", "12345678"),
    ("nie", "NIE X1234567L", "1234567"),
    ("ssn", "SSN 123-45-6789", "45-6789"),
    ("passport", "mi pasaporte es PAA123456", "PAA123456"),
    ("uk nino", "National Insurance number QQ 12 34 56 C", "12 34 56"),
    ("cpf", "CPF 123.456.789-09", "456.789"),
    ("password es", "mi contraseña del banco es Girasol#22", "Girasol#22"),
    ("password short", "pwd: Tr0ub4dor&3", "Tr0ub4dor"),
    ("pin", "el PIN de la tarjeta es 4821", "es 4821"),  # digits alone occur in stored vectors
    ("login pair", "usuario: juan / Cl4ve!x", "Cl4ve"),
    ("openai", "sk-proj-aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "aBcDeFgHiJkLmNoP"),
    ("anthropic", "sk-ant-api03-aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "aBcDeFgHiJkLmNoP"),
    ("stripe secret", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWD"),
    ("stripe publishable", "pk_live_51H8xYzAbCdEfGhIjKlMnOp", "51H8xYzAbCdE"),
    ("stripe webhook", "whsec_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345", "aBcDeFgHiJkL"),
    ("aws access key", "AKIAIOSFODNN7EXAMPLE", "IOSFODNN7"),
    ("aws secret key", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("gcp api key", "AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI", "SyDdI0hCZtE6"),
    ("gcp oauth token", "ya29.a0AfH6SMBx7Rk9dLmQ2pVt8wYz3NcJ4hG5sK1fE", "a0AfH6SMBx7R"),
    ("gcp service account key id", '{"private_key_id": "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"}', "a1b2c3d4e5f6"),
    (
        "azure storage connection string",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFy==",
        "Zm9vYmFyYmF6",
    ),
    (
        "azure sas",
        "https://acct.blob.core.windows.net/c?sv=2021-06-08&sig=AbCdEf12345GhIjKl67890MnOpQr%3D",
        "AbCdEf12345",
    ),
    ("github classic", "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "aBcDeFgHiJkL"),
    ("github fine-grained", "github_pat_11ABCDEFG0aBcDeFgHiJkLmNoPqRsTuV", "11ABCDEFG0aB"),
    ("gitlab", "use glpat-xR4b9Kd2LmN8pQ1sT6vW for ci", "xR4b9Kd2LmN8"),
    ("slack token", "xoxb-123456789012-abcdefghijABCDEF", "abcdefghijABCDEF"),
    ("slack webhook", "https://hooks.slack.com/services/T0AB12CDE/B0FG34HIJ/aBcDeFgHiJkLmNoPqRsTuVwX", "aBcDeFgHiJkL"),
    (
        "jwt",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNryP4J3",
    ),
    ("supabase secret", "sb_secret_aBcDeFgHiJkLmNoPqRsTuVwX", "aBcDeFgHiJkL"),
    ("sendgrid", "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", "ngeVfQFYQlKU"),
    ("npm", "npm_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5", "aB3dE5fG7hI9"),
    ("pypi", "pypi-AgEIcHlwaS5vcmcCJGE0ZjU4YjY4LWI5YjQtNDc0Mi1hZGFkLTFiMGU3Y2Y2Y2Y0ZgACKlszLCJkODQ", "AgEIcHlwaS5v"),
    ("hugging face", "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ12345678", "aBcDeFgHiJkL"),
    ("bearer", "Authorization: Bearer abcDEF123ghiJKL456mnoPQR789stu", "abcDEF123ghi"),
    ("twilio", "twilio SK0123456789abcdef0123456789abcdef", "0123456789abcdef"),
    ("discord", "discord MTA4NzY1NDMyMTA5ODc2NTQzMg.GhIjKl.aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789ab", "MTA4NzY1NDMy"),
    ("telegram", "bot 123456789:AAHfGxK2Lm9Nq8Rs7Tu6Vw5Xy4Za3Bc2De1", "AAHfGxK2Lm9N"),
    ("shopify", "shpat_0123456789abcdef0123456789abcdef", "0123456789abcdef"),
    ("digitalocean", "dop_v1_" + "0123456789abcdef" * 4, "0123456789abcdef"),
    ("databricks", "dapi0123456789abcdef0123456789abcdef", "0123456789abcdef"),
    ("square", "sq0atp-aBcDeFgHiJkLmNoPqRsTuV", "aBcDeFgHiJkL"),
    ("totp seed", "totp secret JBSWY3DPEHPK3PXP", "JBSWY3DPEHPK3PXP"),
    (
        "pem private key",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq8xYz\nabcdef123\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKC",
    ),
    ("openssh private key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END", "b3BlbnNzaC1r"),
    ("postgres url", "DATABASE_URL=postgres://admin:S3cretPass@db.example.com:5432/app", "S3cretPass"),
    ("mongodb url", "mongodb+srv://juan:hunter22@cluster0.abcde.mongodb.net/test", "hunter22"),
    ("https basic auth", "https://juan:MyP4ss@intranet.example.com/", "MyP4ss"),
    ("env password", "DB_PASSWORD=hunter2x", "hunter2x"),
    ("sshpass", "sshpass -p 'Hunter2!' ssh root@10.0.0.1", "Hunter2!"),
    ("mysql cli", "mysql -u root -pS3cr3tPwd app", "S3cr3tPwd"),
]
IDS = [name for name, _, _ in SECRETS]


@pytest.mark.parametrize(("name", "text", "raw"), SECRETS, ids=IDS)
def test_the_filter_catches_every_format(name: str, text: str, raw: str) -> None:
    result = redact_sensitive(text)
    assert result.kinds, name
    assert raw not in result.text


@pytest.mark.parametrize(
    "text",
    [
        "The token for the parking is in the drawer.",
        "Our SK-series spindles ship Monday.",
        "postgres://db.example.com:5432/app has no password in it",
        "The private key ceremony is on Friday.",
        "Order AB123456C for the flanges.",
        "Bearer bonds were popular once.",
        "Mi gestor de contraseñas es estupendo.",
        "My password manager is great.",
    ],
)
def test_text_that_only_looks_like_a_secret_is_kept(text: str) -> None:
    assert redact_sensitive(text).text == text


ALL = "\n".join(text for _, text, _ in SECRETS)


def test_every_format_at_once_and_inside_json() -> None:
    note = redact_note_text(ALL).text or ""
    meta = str(redact_json_value({"speaker": ALL, "nested": [ALL]}).value)
    for _, _, raw in SECRETS:
        assert raw not in note
        assert raw not in meta


AdminConn = psycopg.Connection[tuple[Any, ...]]


async def test_no_format_is_stored_anywhere_on_the_real_write_path(
    pg_memory: MemoryManager,
    admin_conn: AdminConn,
    database_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user = uuid4()
    with caplog.at_level(logging.DEBUG):
        await pg_memory.remember(
            user, f"Lisbon order notes:\n{ALL}", metadata={"speaker": f"Juan {ALL}", "notes": {"all": ALL}}
        )
        primary = await PostgresStore.connect(database_url)
        journal = WriteJournal(tmp_path / "journal" / "writes.jsonl")
        store = ResilientStore(primary, journal, background=False)
        async with MemoryManager.open(MemorySettings(data_dir=tmp_path), store=store) as offline:
            await primary.pool.close()
            await offline.remember(uuid4(), f"Porto order notes:\n{ALL}", metadata={"speaker": ALL})
            assert len(journal) == 1
        queue = await PostgresJobQueue.connect(database_url, max_pending=100_000, max_messages=20)
        try:
            await queue.enqueue(user, "s", [Message(role="user", content=ALL)], "explicit")
        finally:
            await queue.close()
    rows = admin_conn.execute(
        "select coalesce(string_agg(content || ' ' || metadata::text, ' | '), '') from public.user_memory"
        " where user_id = %(u)s",
        {"u": user},
    ).fetchone()
    search = admin_conn.execute(
        "select coalesce(string_agg(content || ' ' || coalesce(speaker, ''), ' | '), '')"
        " from public.memory_search_docs where user_id = %(u)s",
        {"u": user},
    ).fetchone()
    jobs = admin_conn.execute(
        "select coalesce(string_agg(payload::text, ' | '), '') from public.memory_jobs where user_id = %(u)s",
        {"u": user},
    ).fetchone()
    assert rows is not None
    assert search is not None
    assert jobs is not None
    assert "Lisbon" in rows[0]
    assert "Lisbon" in search[0]
    assert jobs[0]
    journal_text = journal.path.read_text()
    leaked = {
        place: [name for name, _, raw in SECRETS if raw in text]
        for place, text in (
            ("user_memory", rows[0]),
            ("memory_search_docs", search[0]),
            ("memory_jobs", jobs[0]),
            ("journal", journal_text),
            ("logs", caplog.text),
        )
    }
    assert leaked == {place: [] for place in leaked}
