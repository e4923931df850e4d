"""`memory-plugin serve` as a user runs it: a separate process on a free port, over the test database, with
the offline embedding model; a chat created through it is found again by topic, and a memory turn recorded through
it is in the next turn's context."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from uuid import uuid4

import httpx
import jwt
import pytest

from tests.test_api import free_port

ROOT = Path(__file__).resolve().parents[1]
SECRET = "serve-secret-with-at-least-32-bytes-of-entropy"


@pytest.mark.slow
async def test_serve_command_answers_over_http(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "MEMORY_DATABASE_URL": database_url,
        "MEMORY_DATA_DIR": str(tmp_path),
        "MEMORY_JWT_SECRET": SECRET,
        "MEMORY_EMBEDDING_MODEL": "local",
        "MEMORY_API_CORS_ORIGINS": "https://app.example",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from memory_plugin.cli import app; app()", "serve", "--port", str(port),
        env=env, cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    user = uuid4()
    headers = {
        "Authorization": "Bearer "
        + jwt.encode(
            {"sub": str(user), "role": "authenticated", "aud": "authenticated", "exp": int(time.time()) + 600},
            SECRET,
            "HS256",
        )
    }
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for _ in range(600):  # the process imports the model stack first: up to 60 s on a loaded machine
                try:
                    if (await client.get("/openapi.json")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if process.returncode is not None:
                    break
                await asyncio.sleep(0.1)
            turns = [
                {"role": "user", "content": "Necesito soportes anodizados en negro para la línea 3."},
                {"role": "assistant", "content": "Anoto soportes anodizados negros, capa de 20 micras."},
            ]
            created = await client.post("/api/chats", json={"turns": turns}, headers=headers)
            assert created.status_code == 201, created.text
            found = await client.get(
                "/api/chats", params={"search": "el chat de los soportes anodizados"}, headers=headers
            )
            assert found.json()["chosen"]["id"] == created.json()["id"]
            # The memory turn runs in the served process: a finish, then the next context holds the exchange.
            finish = {"session_id": "chat-1", "prompt": "Recuerda que prefiero tornillos de titanio", "inline": True}
            finished = await client.post("/api/memory/turns", json={**finish, "answer": "Anotado."}, headers=headers)
            assert finished.status_code == 200, finished.text
            context = await client.post(
                "/api/memory/context", json={"session_id": "chat-1", "prompt": "¿Y los tornillos?"}, headers=headers
            )
            assert context.status_code == 200, context.text
            assert "titanio" in context.json()["instructions"]
            assert len(context.json()["history"]) == 2
            assert (await client.get("/api/chats")).status_code == 401
            # The settings reach the served app: health routes, and CORS for the configured origin.
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/readyz")).status_code == 200
            preflight = await client.options(
                "/api/chats",
                headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
            )
            assert preflight.headers["access-control-allow-origin"] == "https://app.example"
            dashboard = await client.get("/dashboard")  # the sign-in page; no development sign-in unless enabled
            assert dashboard.status_code == 200
            assert "dev-login" not in dashboard.text
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(process.wait(), timeout=20)
            except TimeoutError:
                process.kill()
                await process.wait()
