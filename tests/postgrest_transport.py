"""A small PostgREST emulator, as an httpx transport over the test suite's real PostgreSQL.

Per request it does what PostgREST does: verify the JWT (HS256, `SECRET`; no token means `anon`), then in
one transaction `set_config('role', <role claim>, true)`, `set_config('request.jwt.claims', <claims>, true)`
and the statement, so grants and row-level security apply exactly as behind a Supabase API. It supports
only what `SupabaseStore` sends: RPC POSTs with named JSON arguments, and GET / DELETE on a table with
`eq` / `imatch` filters, `select`, `order` and `limit`. Answers are JSON built by the database (`json_agg`,
as PostgREST does); errors are PostgREST-style `{code, message, details, hint}` with PostgREST's statuses.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any
from uuid import UUID

import httpx
import jwt
import psycopg
from psycopg import sql

from memory_plugin import SupabaseStore

SECRET = "memory-plugin-test-jwt-secret-0123456789"  # HS256 wants >= 32 bytes
API_URL = "http://supabase.test"
_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_OPERATORS = {"eq": "=", "imatch": "~*"}
_PRELUDE = "select set_config('role', %s, true), set_config('request.jwt.claims', %s, true)"


def mint_token(sub: UUID | None, *, role: str = "authenticated", secret: str = SECRET, ttl: float = 3600) -> str:
    """A Supabase-like access token for user `sub` (or the anon key when `role="anon"`)."""
    claims: dict[str, Any] = {"role": role, "aud": role, "exp": int(time.time() + ttl)}
    if sub is not None:
        claims["sub"] = str(sub)
    return jwt.encode(claims, secret, algorithm="HS256")


ANON_KEY = mint_token(None, role="anon", ttl=10 * 365 * 86400)


def supabase_store(database_url: str, **kwargs: Any) -> SupabaseStore:
    """A `SupabaseStore` over this emulator, each user's token minted on demand."""
    return SupabaseStore(
        API_URL, ANON_KEY, access_token=mint_token, transport=PostgrestTransport(database_url), **kwargs
    )


def _error(status: int, code: str, message: str, details: str | None = None, hint: str | None = None) -> httpx.Response:
    return httpx.Response(status, json={"code": code, "message": message, "details": details, "hint": hint})


def _status(sqlstate: str, role: str) -> int:
    """PostgREST's HTTP status for a PostgreSQL error (the subset that matters here)."""
    if sqlstate.startswith("PT") and sqlstate[2:].isdigit():  # a status the SQL chose (the database's bounds)
        return int(sqlstate[2:])
    if sqlstate == "42501":  # insufficient privilege, including RLS refusing a row
        return 401 if role == "anon" else 403
    if sqlstate in ("42883", "42P01"):  # no such function / table
        return 404
    if sqlstate in ("23503", "23505"):
        return 409
    if sqlstate[:2] in ("08", "53"):
        return 503
    if sqlstate[:2] in ("25", "40", "54", "55", "57", "58", "XX") or (sqlstate[:2] == "P0" and sqlstate != "P0001"):
        return 500
    return 400


def _name(value: str) -> sql.Identifier:
    if not _NAME.fullmatch(value):
        raise ValueError(f"unsupported name {value!r}")
    return sql.Identifier(value)


def _sql_text(value: Any) -> str | None:
    """A JSON argument as an untyped literal: PostgreSQL casts it to the parameter's declared type, which is
    what PostgREST achieves with its schema cache."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and not any(isinstance(v, dict | list) for v in value):
        # A JSON array of scalars: PostgREST turns it into the parameter's array type (`timestamptz[]`...);
        # as an untyped literal that is PostgreSQL's array syntax. (JSON parameters here always receive
        # objects, or lists of objects, which stay JSON below.)
        return "{" + ",".join("NULL" if v is None else '"' + _array_element(v) + '"' for v in value) + "}"
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _array_element(value: Any) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"')


class PostgrestTransport(httpx.AsyncBaseTransport):
    """Answers `/rest/v1/...` requests from the database at `database_url`, each in a transaction of its own on
    a connection that is idle between requests (as PostgREST's pool does): a new server process per request
    cost ~5 ms, plus compiling every PL/pgSQL function it called again (~30 ms of the server's CPU for a write).
    A kept connection that fails before its statement runs (the server restarted) is replaced by a new one."""

    def __init__(self, database_url: str, *, secret: str = SECRET) -> None:
        self.database_url = database_url
        self.secret = secret
        self.requests: list[httpx.Request] = []
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        """The event loop the idle connections belong to (a connection is only reused on its own loop)."""

    async def _run(self, role: str, claims: dict[str, Any], query: sql.Composed, params: list[Any]) -> Any:
        """The first row of `query`, after the role and claims are set, in one transaction."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._idle, self._loop = [], loop
        while True:
            kept = self._idle.pop() if self._idle else None
            conn = kept or await psycopg.AsyncConnection.connect(self.database_url)
            try:
                async with conn.transaction():
                    await conn.execute(_PRELUDE, (role, json.dumps(claims)))
                    row = await (await conn.execute(query, params)).fetchone()
            except psycopg.Error as exc:
                if conn.broken or exc.sqlstate is None:
                    await conn.close()
                else:
                    self._idle.append(conn)  # an error of the statement: the transaction was rolled back
                if kept is not None and exc.sqlstate is None:
                    continue  # a connection that died while idle: the request runs on a new one
                raise
            self._idle.append(conn)
            return row

    async def aclose(self) -> None:
        """Close the idle connections (the client closes its transport)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()

    def _claims(self, request: httpx.Request) -> dict[str, Any]:
        auth = request.headers.get("authorization", "")
        if not auth.startswith("Bearer "):
            return {"role": "anon"}
        claims: dict[str, Any] = jwt.decode(
            auth.removeprefix("Bearer "), self.secret, algorithms=["HS256"], options={"verify_aud": False}
        )
        return claims

    def _statement(self, request: httpx.Request, resource: str) -> tuple[sql.Composed, list[Any]]:
        """The SQL for one request, returning a single row holding the JSON answer (or none)."""
        if resource.startswith("rpc/") and request.method == "POST":
            body = json.loads(request.content or b"{}")
            if not isinstance(body, dict):
                raise ValueError("RPC arguments must be a JSON object")
            args = sql.SQL(", ").join(sql.SQL("{} => {}").format(_name(k), sql.Placeholder()) for k in body)
            source = sql.SQL("public.{}({})").format(_name(resource.removeprefix("rpc/")), args)
            values = [_sql_text(v) for v in body.values()]
            return sql.SQL("select coalesce(json_agg(t), '[]')::text from {} as t").format(source), values
        table = _name(resource)
        columns: sql.Composable = sql.SQL("*")
        where: list[sql.Composable] = []
        order: list[sql.Composable] = []
        limit: list[sql.Composable] = []
        params: list[Any] = []
        for key, value in request.url.params.multi_items():
            if key == "select" and value != "*":
                columns = sql.SQL(", ").join(_name(c) for c in value.split(","))
            elif key == "order":
                for term in value.split(","):
                    column, _, direction = term.partition(".")
                    order.append(
                        sql.SQL("{} {}").format(_name(column), sql.SQL("desc" if direction == "desc" else "asc"))
                    )
            elif key == "limit":
                limit.append(sql.SQL("limit {}").format(sql.Literal(int(value))))
            elif key != "select":
                op, _, operand = value.partition(".")
                if op not in _OPERATORS:
                    raise ValueError(f"unsupported filter {key}={value}")
                where.append(sql.SQL("{} {} %s").format(_name(key), sql.SQL(_OPERATORS[op])))
                params.append(operand)
        condition = sql.SQL(" and ").join(where) if where else sql.SQL("true")
        if request.method == "GET":
            query = sql.SQL("select {} from public.{} where {}").format(columns, table, condition)
            if order:
                query = sql.SQL("{} order by {}").format(query, sql.SQL(", ").join(order))
            query = sql.SQL(" ").join([query, *limit])
        elif request.method == "DELETE" and where and not order and not limit:
            query = sql.SQL("delete from public.{} where {} returning {}").format(table, condition, columns)
            if "return=representation" not in request.headers.get("prefer", ""):
                return sql.SQL("with t as ({}) select null from t where false").format(query), params
        else:
            raise ValueError(f"unsupported request {request.method} {resource}")
        return sql.SQL("with t as ({}) select coalesce(json_agg(t), '[]')::text from t").format(query), params

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Run the request as its JWT's role and claims, in one transaction."""
        self.requests.append(request)
        if not request.url.path.startswith("/rest/v1/"):
            return _error(404, "PGRST125", f"invalid path {request.url.path}")
        if "apikey" not in request.headers:  # the Supabase gateway refuses requests without a key
            return _error(401, "401", "No API key found in request")
        try:
            claims = self._claims(request)
        except jwt.PyJWTError as exc:
            return _error(401, "PGRST301", str(exc))
        role = str(claims.get("role", "anon"))
        try:
            query, params = self._statement(request, request.url.path.removeprefix("/rest/v1/"))
        except ValueError as exc:
            return _error(400, "PGRST100", str(exc))
        try:
            row = await self._run(role, claims, query, params)
        except psycopg.Error as exc:
            if exc.sqlstate is None:  # could not reach the database
                return _error(503, "PGRST001", str(exc))
            diag = exc.diag
            return _error(
                _status(exc.sqlstate, role),
                exc.sqlstate,
                diag.message_primary or str(exc),
                diag.message_detail,
                diag.message_hint,
            )
        if row is None:
            return httpx.Response(204)
        return httpx.Response(200, content=row[0], headers={"content-type": "application/json; charset=utf-8"})
