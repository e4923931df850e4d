"""Sensitive facts sealed at rest: nothing of their text in any table or the journal, the owner reads them, a wrong
or missing key is a typed error (and a context without that row), and a ciphertext moved to another row fails."""

from __future__ import annotations

import base64
import os
import re
from typing import Any
from uuid import UUID, uuid4

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic_ai import Agent, Embedder
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memory_plugin import EncryptionKeyError, MemoryCapability, MemoryDeps, MemoryManager, MemorySettings
from memory_plugin.api.app import ApiServices, create_app
from memory_plugin.api.auth import TokenVerifier
from memory_plugin.chats import ChatService, PostgresChatStore
from memory_plugin.crypto import parse_key_ring
from memory_plugin.dashboard import add_dashboard
from memory_plugin.database.admin import MemoryAdmin
from memory_plugin.embeddings import MemoryEmbedder
from memory_plugin.errors import ConfigurationError, InvalidMemoryInputError
from memory_plugin.formatting import format_memory_for_agent
from memory_plugin.models import MemorizedFact, MemoryUpdate
from memory_plugin.rows import MemoryItem
from memory_plugin.store.memory import InMemoryStore
from memory_plugin.store.postgres import PostgresStore
from memory_plugin.store.sealed import SealedStore
from memory_plugin.write.items import fact_item
from tests.chat_helpers import WordHashModel, word_embedder
from tests.postgrest_transport import supabase_store
from tests.test_api import SECRET, auth, token

pytestmark = pytest.mark.asyncio(loop_scope="session")

HASH_KEY = base64.b64encode(os.urandom(32)).decode()
# Distinctive words of each secret: none of them may be anywhere in the database, in any case or stemmed form.
SECRETS = {
    "Toma insulina glargina cada noche": ("glargina", "insulina"),
    "Su cuñada Filomena Quintanilla vive en Soria": ("quintanilla", "filomena"),
    "Camina por prescripción con bastón ortopédico": ("bastón", "baston", "ortopédico", "ortopedico"),
}


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def keyed(base: MemorySettings, keys: str, active: str | None = None) -> MemorySettings:
    return MemorySettings(
        database_url=base.database_url,
        data_dir=base.data_dir,
        encryption_keys=keys,
        encryption_active_key=active,
        encryption_hash_key=HASH_KEY,
        embedding_model="none",
    )


async def write_secrets(memory: MemoryManager, user: UUID) -> None:
    """One secret marked sensitive, one contact and one health note sealed by their category, one plain fact."""
    await memory.remember(user, "Toma insulina glargina cada noche", sensitive=True)
    await memory.update_memory(
        MemoryUpdate(
            user_id=user,
            new_facts=[
                MemorizedFact(content="Su cuñada Filomena Quintanilla vive en Soria", category="contact",
                              confidence=0.9, source="explicit"),
                MemorizedFact(content="Camina por prescripción con bastón ortopédico", category="health_note",
                              confidence=0.9, source="explicit"),
                MemorizedFact(content="Trabaja con aluminio 7075 anodizado", category="fact", confidence=0.9,
                              source="explicit"),
            ],
        )
    )  # fmt: skip


def dump_database(conn: psycopg.Connection[Any]) -> str:
    """Every row of every table of every schema but the system's, as text, lower-cased."""
    tables = conn.execute(
        "select n.nspname, c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where c.relkind in ('r', 'm') and n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast')"
    ).fetchall()
    parts = []
    for schema, name in tables:
        query = sql.SQL("select t::text from {} t").format(sql.Identifier(str(schema), str(name)))
        parts += [str(r[0]) for r in conn.execute(query).fetchall()]
    return "\n".join(parts).lower()


async def test_sealed_facts_leave_no_plain_text_in_any_table_and_the_owner_reads_them(
    pg_settings: MemorySettings, admin_conn: psycopg.Connection[Any]
) -> None:
    user = uuid4()
    settings = keyed(pg_settings, f"k1:{new_key()}")
    async with MemoryManager.open(settings) as memory:
        await write_secrets(memory, user)
        await memory.remember(user, "Toma insulina glargina cada noche", sensitive=True)  # an exact repeat

        dump = dump_database(admin_conn)
        assert "aluminio 7075 anodizado" in dump  # the dump does see the plain fact
        for words in SECRETS.values():
            assert not any(word in dump for word in words)

        rows = {r[0]: r[1:] for r in admin_conn.execute(
            "select content, key_id, content_hash, match_key, slot from public.user_memory where user_id = %s", (user,)
        ).fetchall()}  # fmt: skip
        sealed = [v for k, v in rows.items() if k.startswith("sealed:v1:k1:")]
        assert len(sealed) == 3  # the repeat reinforced its row (keyed hash), no fourth row
        assert all(key == "k1" and h.startswith("hmac:") and mk is None and s is None for key, h, mk, s in sealed)
        docs = admin_conn.execute("select count(*) from public.memory_search_docs where user_id = %s", (user,))
        assert docs.fetchone() == (1,)  # only the plain fact has a search row

        # The owner sees the plain text: the list, the history, the context the agent is given.
        listed = {r.content: r for r in await memory.list_memory(user)}
        assert set(SECRETS) <= set(listed)
        assert listed["Toma insulina glargina cada noche"].relevance_count == 1
        assert listed["Toma insulina glargina cada noche"].key_id == "k1"
        assert {f.content for f in await memory.fact_history(user) if f.sensitive} == set(SECRETS)
        context = await memory.get_memory_context("s-enc", user)
        text = format_memory_for_agent(context)
        assert all(secret in text for secret in SECRETS)
        assert "sealed:v1" not in text
        # A query-aware context (the capability's) keeps the best-ranked sealed facts beside the search's hits.
        asked = format_memory_for_agent(await memory.get_memory_context("s-enc", user, query="¿Con qué trabaja?"))
        assert "Trabaja con aluminio 7075 anodizado" in asked
        assert all(secret in asked for secret in SECRETS)
        # Search keeps working on the plain facts and never finds a sealed one.
        assert [h.memory.content for h in await memory.search(user, "aluminio anodizado")] == [
            "Trabaja con aluminio 7075 anodizado"
        ]
        assert await memory.search(user, "insulina glargina") == []
        assert await memory.search_text(user, "sealed:v1") == []  # nor by a match on the ciphertext


async def test_a_missing_or_wrong_key_is_a_typed_error_and_the_context_leaves_the_row_out(
    pg_settings: MemorySettings, caplog: pytest.LogCaptureFixture
) -> None:
    user = uuid4()
    async with MemoryManager.open(keyed(pg_settings, f"k1:{new_key()}")) as memory:
        await write_secrets(memory, user)
    for keys in (f"k2:{new_key()}", f"k1:{new_key()}"):  # k1 not configured; k1 with other key material
        async with MemoryManager.open(keyed(pg_settings, keys)) as memory:
            with pytest.raises(EncryptionKeyError, match="'k1'"):
                await memory.list_memory(user)
            context = await memory.get_memory_context("s-wrong", user)
            text = format_memory_for_agent(context)
            assert "Trabaja con aluminio 7075 anodizado" in text
            assert "sealed:v1" not in text
            assert not any(s in text for s in SECRETS)
            assert memory.store.unreadable_rows == 3  # left out, counted and logged, not raised
            assert "3 sealed memory row(s)" in caplog.text
    async with MemoryManager.open(pg_settings) as memory:  # no keys at all
        with pytest.raises(EncryptionKeyError, match="not configured"):
            await memory.list_memory(user)
        text = format_memory_for_agent(await memory.get_memory_context("s-none", user))
        assert "Trabaja con aluminio 7075 anodizado" in text
        assert "sealed:v1" not in text


async def test_a_ciphertext_moved_to_another_users_row_does_not_open(
    pg_settings: MemorySettings, admin_conn: psycopg.Connection[Any]
) -> None:
    owner, other = uuid4(), uuid4()
    async with MemoryManager.open(keyed(pg_settings, f"k1:{new_key()}")) as memory:
        await memory.remember(owner, "Toma insulina glargina cada noche", sensitive=True)
        await memory.remember(other, "Su clave del portal es 4471", sensitive=True)
        admin_conn.execute(
            "update public.user_memory set content = (select content from public.user_memory where user_id = %s)"
            " where user_id = %s",
            (owner, other),
        )
        with pytest.raises(EncryptionKeyError, match="moved to another user"):
            await memory.list_memory(other)
        assert [r.content for r in await memory.list_memory(owner)] == ["Toma insulina glargina cada noche"]


async def test_a_write_marked_sensitive_without_keys_is_refused_and_nothing_is_stored(
    ram_memory: MemoryManager,
) -> None:
    user = uuid4()
    with pytest.raises(EncryptionKeyError, match="MEMORY_ENCRYPTION_KEYS"):
        await ram_memory.remember(user, "Toma insulina glargina cada noche", sensitive=True)
    assert await ram_memory.list_memory(user) == []
    with pytest.raises(InvalidMemoryInputError, match="sealed:v1:"):
        await ram_memory.remember(user, "sealed:v1:k1:AAAA")  # would read back as a sealed row
    # Without keys, the categories alone change nothing: a health note is stored as before.
    await ram_memory.remember(user, "Camina cada mañana", category="health_note")
    assert [r.key_id for r in await ram_memory.list_memory(user)] == [None]


@pytest.mark.parametrize("backend", ["memory", "supabase"])
async def test_the_other_stores_seal_and_open_the_same_way(backend: str, pg_settings: MemorySettings) -> None:
    user = uuid4()
    assert pg_settings.database_url is not None
    store = InMemoryStore() if backend == "memory" else supabase_store(pg_settings.database_url.get_secret_value())
    settings = keyed(pg_settings, f"k1:{new_key()}")
    async with MemoryManager.open(settings, store=store) as memory:
        await write_secrets(memory, user)
        stored = await store.list_records(user)
        assert sum(r.content.startswith("sealed:v1:k1:") for r in stored) == 3
        assert set(SECRETS) <= {r.content for r in await memory.list_memory(user)}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"encryption_keys": "k1"}, "id:base64 pairs"),
        ({"encryption_keys": "k1:not base64!"}, "not base64"),
        ({"encryption_keys": f"k1:{base64.b64encode(b'short').decode()}"}, "16, 24 or 32"),
        ({"encryption_keys": f"k1:{new_key()}"}, "MEMORY_ENCRYPTION_HASH_KEY is required"),
        ({"encryption_keys": f"k1:{new_key()}", "encryption_hash_key": HASH_KEY, "encryption_active_key": "k9"}, "k9"),
        ({"encryption_hash_key": HASH_KEY}, "without MEMORY_ENCRYPTION_KEYS"),
        ({"sensitive_categories": ["medical"]}, "unknown fact categories"),
    ],
)
async def test_malformed_encryption_settings_are_refused_at_start_naming_the_variable(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        MemorySettings(**values)
    assert "MEMORY_" in str(caught.value)
    secret = str(values.get("encryption_keys", "")).partition(":")[2]
    assert not secret or secret not in str(caught.value)  # key material is never echoed


class _Recorder(InMemoryStore):
    """Records what reaches the wrapped store: what an outage journal or cache would hold."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[MemoryItem] = []

    async def upsert(self, user_id: UUID, items: Any, rules: Any = None, *, write_id: UUID | None = None) -> Any:
        self.items += items
        return await super().upsert(user_id, items, write_id=write_id)


async def test_what_reaches_the_wrapped_store_journal_and_cache_is_sealed() -> None:
    user = uuid4()
    inner = _Recorder()
    ring = parse_key_ring(f"k1:{new_key()}", None, HASH_KEY)
    store = SealedStore(inner, ring, ("health_note",))
    item = MemoryItem(kind="fact", category="fact", content="Toma insulina glargina", content_hash="h1",
                      sensitive=True, match_key="toma insulina glargina", embedding=(0.1,) * 384,
                      embedding_model="m")  # fmt: skip
    (record,) = await store.upsert(user, [item])
    assert record.content == "Toma insulina glargina"
    assert record.content_hash == "h1"  # the writer matches rows to items by their own hash
    (stored,) = inner.items
    assert stored.content.startswith("sealed:v1:k1:")
    assert "glargina" not in repr(stored).lower()
    assert stored.content_hash.startswith("hmac:")
    assert (stored.embedding, stored.match_key, stored.slot) == (None, None, None)
    # The outage copy of shown facts holds them sealed as well.
    store.cache_shown_facts(user, [record])  # a no-op on this store, but must not fail on an opened record


async def test_the_rest_api_and_the_dashboard_show_the_owner_the_plain_text_and_a_correction_stays_sealed(
    database_url: str, admin_conn: psycopg.Connection[Any]
) -> None:
    user = uuid4()
    ring = parse_key_ring(f"k1:{new_key()}", None, HASH_KEY)
    pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
        database_url, min_size=1, max_size=2, open=False, kwargs={"autocommit": True, "row_factory": dict_row}
    )
    await pool.open(wait=True)
    try:
        store = SealedStore(PostgresStore(pool), ring, ("health_note",))
        await store.upsert(user, [fact_item(MemorizedFact(content="Su cuñada Filomena vive en Soria",
                                                           category="fact", confidence=1.0, source="explicit",
                                                           sensitive=True), None)])  # fmt: skip
        services = ApiServices(
            chats=ChatService(PostgresChatStore(pool), word_embedder()), verifier=TokenVerifier(secret=SECRET),
            memory=store,
        )  # fmt: skip
        app = create_app(services)
        add_dashboard(app, services, pool)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            records = (await client.get("/api/memory/records", headers=auth(user))).json()
            assert [(r["content"], r["sensitive"]) for r in records] == [("Su cuñada Filomena vive en Soria", True)]
            client.cookies.set("memory_dashboard", token(user))
            home = (await client.get("/dashboard")).text
            assert "Su cuñada Filomena vive en Soria" in home
            assert "sealed:v1" not in home
            csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', home)
            assert csrf is not None
            fixed = {"csrf": csrf.group(1), "content": "Su cuñada Filomena vive en Burgos"}
            corrected = await client.post(f"/dashboard/facts/{records[0]['id']}/correct", data=fixed)
            assert corrected.status_code == 303
        rows = admin_conn.execute(
            "select content, key_id, invalid_at is null from public.user_memory where user_id = %s", (user,)
        ).fetchall()
        assert len(rows) == 2
        assert all(content.startswith("sealed:v1:k1:") and key == "k1" for content, key, _ in rows)
        current = [r.content for r in await store.list_records(user) if r.invalid_at is None]
        assert current == ["Su cuñada Filomena vive en Burgos"]
    finally:
        await pool.close()


async def test_an_export_holds_the_ciphertext_and_imports_back_to_the_same_document(
    pg_settings: MemorySettings, database_url: str
) -> None:
    user = uuid4()
    async with MemoryManager.open(keyed(pg_settings, f"k1:{new_key()}")) as memory:
        await write_secrets(memory, user)
        first = "".join([chunk async for chunk in memory.export_user(user)])
        assert "sealed:v1:k1:" in first
        assert "aluminio 7075 anodizado" in first
        assert not any(word in first.lower() for words in SECRETS.values() for word in words)
        async with await MemoryAdmin.connect(database_url) as admin:
            await admin.erase_user(user)
        await memory.import_user(first)
        assert "".join([chunk async for chunk in memory.export_user(user)]) == first
        assert set(SECRETS) <= {r.content for r in await memory.list_memory(user)}


class _SeenModel(WordHashModel):
    """The word-hash embedding model, remembering every text it was asked to embed."""

    __test__ = False

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    async def embed(self, inputs: Any, *, input_type: Any, settings: Any = None) -> Any:
        self.seen += [inputs] if isinstance(inputs, str) else list(inputs)
        return await super().embed(inputs, input_type=input_type, settings=settings)


async def test_a_sealed_fact_is_never_sent_to_the_embedder(pg_settings: MemorySettings) -> None:
    user = uuid4()
    model = _SeenModel()
    embedder = MemoryEmbedder(Embedder(model), name="words")
    async with MemoryManager.open(keyed(pg_settings, f"k1:{new_key()}"), embedder=embedder) as memory:
        await write_secrets(memory, user)
        assert any("aluminio" in text for text in model.seen)  # the plain fact was embedded
        assert not any(word in text.lower() for text in model.seen for words in SECRETS.values() for word in words)


def _agreed(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("De acuerdo.")])


async def test_a_stored_receipt_shows_the_sealed_fact_to_its_owner_and_never_its_ciphertext(
    pg_settings: MemorySettings, admin_conn: psycopg.Connection[Any]
) -> None:
    user, key = uuid4(), f"k1:{new_key()}"
    async with MemoryManager.open(keyed(pg_settings, key)) as memory:
        await memory.remember(user, "Su cuñada Filomena vive en Soria", sensitive=True, importance=5)
        note = MemorizedFact(content="Camina con bastón ortopédico", category="health_note", confidence=0.9,
                             source="explicit")  # fmt: skip
        await memory.update_memory(MemoryUpdate(user_id=user, new_facts=[note]))  # a standing constraint if plain
        agent = Agent(FunctionModel(_agreed), deps_type=MemoryDeps, capabilities=[MemoryCapability(memory)])
        await agent.run("¿Dónde vive la familia?", deps=MemoryDeps(session_id=f"s-{uuid4()}", user_id=user))
        assert await memory.flush()
    dump = dump_database(admin_conn)
    assert "filomena" not in dump  # receipts name facts by id; slots and summaries hold none
    assert "ortopédico" not in dump

    async with MemoryManager.open(keyed(pg_settings, key)) as memory:
        [receipt] = await memory.receipts(user)
        shown = receipt.receipt.injected + receipt.receipt.in_slots
        assert "Su cuñada Filomena vive en Soria" in [f.content for f in shown]
    async with MemoryManager.open(pg_settings) as memory:  # without the key: an empty text, not ciphertext
        [receipt] = await memory.receipts(user)
        shown = receipt.receipt.injected + receipt.receipt.in_slots
        assert shown
        assert not any("sealed:v1" in f.content or "Filomena" in f.content for f in shown)
