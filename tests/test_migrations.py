"""The migrations are append-only, and the declarative schema (`supabase/schemas/*.sql`) is the schema they make.

`supabase/migrations/CHECKSUMS` lists every migration file with its sha256 (`sha256sum` format): a landed
migration that changes, or a new one not listed, fails here. A fresh database migrated from the files and a
fresh database built from `supabase/schemas/` in order must have the same catalog: every function's
definition, tables and columns, constraints, indexes, triggers, policies, grants and comments.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from memory_plugin.database.migrations import (
    SUPERSEDED_VERSIONS,
    MigrationError,
    auth_shim_path,
    load_migrations,
    migrate,
)

SUPABASE = Path(__file__).resolve().parents[1] / "supabase"
MIGRATIONS = SUPABASE / "migrations"
SCHEMAS = SUPABASE / "schemas"
AdminConn = psycopg.Connection[tuple[Any, ...]]

OURS = "('public', 'memory_private')"
# What the schema is made of, each as rows that must be equal in both databases. Objects of extensions
# (pg_depend deptype 'e') are the extension's, not ours.
CATALOG: dict[str, str] = {
    "functions": f"""
        select n.nspname, p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid),
               coalesce(p.proacl::text, ''), coalesce(obj_description(p.oid, 'pg_proc'), '')
          from pg_proc p join pg_namespace n on n.oid = p.pronamespace
         where n.nspname in {OURS}
           and not exists (select from pg_depend d where d.objid = p.oid and d.deptype = 'e')""",
    "relations": f"""
        select n.nspname, c.relname, c.relkind::text, c.relrowsecurity, c.relforcerowsecurity,
               coalesce(c.relacl::text, ''), coalesce(c.reloptions::text, ''),
               coalesce(pg_get_expr(c.relpartbound, c.oid), ''), coalesce(pg_get_partkeydef(c.oid), ''),
               coalesce(obj_description(c.oid, 'pg_class'), '')
          from pg_class c join pg_namespace n on n.oid = c.relnamespace
         where n.nspname in {OURS} and c.relkind in ('r', 'p', 'v', 'm', 'S', 'f')
           and not exists (select from pg_depend d where d.objid = c.oid and d.deptype = 'e')""",
    "columns": f"""
        select n.nspname, c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               coalesce(pg_get_expr(ad.adbin, ad.adrelid), ''), a.attgenerated::text, a.attidentity::text,
               a.attstorage::text, coalesce(a.attacl::text, ''), coalesce(col_description(c.oid, a.attnum), '')
          from pg_attribute a
          join pg_class c on c.oid = a.attrelid
          join pg_namespace n on n.oid = c.relnamespace
          left join pg_attrdef ad on ad.adrelid = a.attrelid and ad.adnum = a.attnum
         where n.nspname in {OURS} and c.relkind in ('r', 'p', 'v') and a.attnum > 0 and not a.attisdropped""",
    "constraints": f"""
        select n.nspname, c.relname, k.conname, pg_get_constraintdef(k.oid)
          from pg_constraint k join pg_class c on c.oid = k.conrelid join pg_namespace n on n.oid = c.relnamespace
         where n.nspname in {OURS}""",
    "indexes": f"""
        select schemaname, tablename, indexname, indexdef from pg_indexes where schemaname in {OURS}""",
    "triggers": f"""
        select n.nspname, c.relname, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled::text
          from pg_trigger t join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace
         where n.nspname in {OURS} and not t.tgisinternal""",
    "policies": f"""
        select schemaname, tablename, policyname, permissive, roles::text, cmd, coalesce(qual, ''),
               coalesce(with_check, '')
          from pg_policies where schemaname in {OURS}""",
    "schemas": """
        select nspname, coalesce(nspacl::text, ''), coalesce(obj_description(oid, 'pg_namespace'), '')
          from pg_namespace where nspname in ('public', 'memory_private', 'extensions')""",
    "extensions": """
        select e.extname, n.nspname from pg_extension e join pg_namespace n on n.oid = e.extnamespace""",
    "text_search": f"""
        select n.nspname, c.cfgname, m.maptokentype, m.mapseqno, m.mapdict::regdictionary::text
          from pg_ts_config c join pg_namespace n on n.oid = c.cfgnamespace
          join pg_ts_config_map m on m.mapcfg = c.oid
         where n.nspname in {OURS}""",
    "dictionaries": f"""
        select n.nspname, d.dictname, coalesce(d.dictinitoption, '')
          from pg_ts_dict d join pg_namespace n on n.oid = d.dictnamespace where n.nspname in {OURS}""",
}


def _catalog(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        return {name: sorted(conn.execute(query).fetchall(), key=repr) for name, query in CATALOG.items()}


@pytest.fixture
def new_database(admin_conn: AdminConn, database_url: str) -> Iterator[Any]:
    """A factory of new, empty databases on the session's server, dropped at the end."""
    names: list[str] = []

    def create() -> str:
        name = f"mp_schema_{uuid4().hex[:12]}"
        admin_conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        names.append(name)
        return make_conninfo(database_url, dbname=name)

    yield create
    for name in names:
        admin_conn.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))


def _listed_checksums() -> dict[str, str]:
    listed = {}
    for line in (MIGRATIONS / "CHECKSUMS").read_text().splitlines():
        if line.strip():
            digest, name = line.split()
            listed[name] = digest
    return listed


def test_every_migration_is_listed_with_its_checksum_and_unchanged() -> None:
    listed = _listed_checksums()
    files = {p.name for p in MIGRATIONS.glob("*.sql")}
    assert files - set(listed) == set(), (
        "a new migration must be added to supabase/migrations/CHECKSUMS: "
        "(cd supabase/migrations && sha256sum NEW_FILE.sql >> CHECKSUMS)"
    )
    assert set(listed) - files == set(), "a landed migration was removed: migrations are append-only"
    for name, digest in listed.items():
        actual = hashlib.sha256((MIGRATIONS / name).read_bytes()).hexdigest()
        assert actual == digest, f"{name} changed after it landed: add a new migration instead"


def test_migration_files_are_named_as_the_supabase_cli_names_them() -> None:
    for path in MIGRATIONS.glob("*.sql"):
        version, _, name = path.stem.partition("_")
        assert len(version) == 14, path.name
        assert version.isdigit(), path.name
        assert name, path.name
    assert not {m.version for m in load_migrations()} & SUPERSEDED_VERSIONS


@pytest.mark.slow
async def test_a_migrated_database_matches_the_declarative_schema(new_database: Any) -> None:
    migrated, declared = new_database(), new_database()
    async with await psycopg.AsyncConnection.connect(migrated, autocommit=True) as conn:
        assert await migrate(conn)
    with psycopg.connect(declared, autocommit=True) as conn:
        conn.execute(auth_shim_path().read_text())
        for path in sorted(SCHEMAS.glob("*.sql")):
            conn.execute(path.read_text())
    expected, actual = _catalog(declared), _catalog(migrated)
    assert expected["functions"], "the schema files define functions"
    for name in CATALOG:
        assert actual[name] == expected[name], f"{name} differ between the migrations and supabase/schemas/"


async def test_a_database_of_the_pre_release_migrations_is_refused_with_what_to_do(new_database: Any) -> None:
    url = new_database()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            "create schema supabase_migrations;"
            " create table supabase_migrations.schema_migrations (version text primary key, statements text[],"
            " name text);"
            " insert into supabase_migrations.schema_migrations values ('20261122120000', null, 'user_memory')"
        )
        with pytest.raises(MigrationError, match="pre-release migration files"):
            await migrate(conn)
        cur = await conn.execute("select to_regclass('public.user_memory')")
        assert await cur.fetchone() == (None,)  # nothing applied on top
