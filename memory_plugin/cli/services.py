"""The long-running commands: `worker` (runs queued memory work) and `serve` (the REST API). Both use the
generic vocabulary unless `MEMORY_VOCABULARY_MODULE` names an application's (`cli/common.load_settings`)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from ..errors import MemoryPluginError
from ..manager import MemoryManager
from ..settings import MemorySettings
from .common import DataDirOption, app, fail, load_settings, out, run

__all__ = ["serve", "worker_command"]


async def _worker(settings: MemorySettings, *, retry_dead: bool, drain: bool) -> None:
    settings = settings.model_copy(update={"background_worker": True})
    async with MemoryManager.open(settings) as memory:
        queue = await memory.queue_status()
        if queue.backend != "postgres":
            raise fail("the worker needs the Postgres queue: set MEMORY_DATABASE_URL to the application's database")
        if retry_dead:
            revived = await memory.retry_dead_jobs()
            out().print(f"{revived} dead jobs queued again")
            return
        # The facts its jobs write patch the users' slots, and a due rolling summary is written in the job's
        # own call, as in the application's process: the manager's own context builder, on its one pool
        # (closed after the manager's worker let running jobs finish).
        await memory.context_builder()
        out().print(f"worker running ({settings.background_concurrency} jobs at a time); Ctrl-C stops it")
        while True:
            await asyncio.sleep(settings.background_poll_seconds)
            if drain and not (await memory.queue_status()).depth:
                break


@app.command("worker")
def worker_command(
    data_dir: DataDirOption = None,
    retry_dead: Annotated[
        bool, typer.Option("--retry-dead", help="Queue the dead jobs again (fresh attempts), then exit.")
    ] = False,
    drain: Annotated[bool, typer.Option("--drain", help="Exit once the queue is empty.")] = False,
) -> None:
    """Run memory work queued by applications (fact extraction) in this process, alongside or instead of their
    own workers (MEMORY_BACKGROUND_WORKER=false). Several workers share the queue; each job runs once."""
    run(_worker(load_settings(data_dir), retry_dead=retry_dead, drain=drain))


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8000,
    data_dir: DataDirOption = None,
) -> None:
    """Serve the REST API for chats and memory (needs the `api` extra and MEMORY_JWT_SECRET or MEMORY_JWT_JWKS_URL)."""
    try:
        from ..api.server import serve as serve_api
    except ImportError as exc:
        raise fail(f"the API needs its extra: pip install 'memory-plugin[api]' ({exc})") from None
    try:
        serve_api(load_settings(data_dir), host=host, port=port)
    except MemoryPluginError as exc:
        raise fail(str(exc)) from None
