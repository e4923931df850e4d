"""The long-running commands: `worker` (runs queued memory work) and `serve` (the REST API). Both use the
generic vocabulary unless `MEMORY_VOCABULARY_MODULE` names an application's (`cli/common.load_settings`)."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import typer

from ..errors import MemoryPluginError, StoreUnavailableError
from ..manager import MemoryManager
from ..settings import MemorySettings
from .common import DataDirOption, app, err, fail, load_settings, out, run

__all__ = ["serve", "worker_command"]


# `worker --drain` exit codes: 0 the queue drained and no job died meanwhile; DRAIN_JOBS_DIED when it drained
# but jobs failed for good (dead: `--retry-dead` queues them again); 1 the database could not be reached (at
# start, or no queue read succeeded for DRAIN_UNREACHABLE_SECONDS). A read that times out because this
# worker's own jobs hold the pool's connections is not a failure: the jobs finish or are retried.
DRAIN_JOBS_DIED = 2
DRAIN_UNREACHABLE_SECONDS = 60.0


async def _worker(settings: MemorySettings, *, retry_dead: bool, drain: bool) -> int:
    settings = settings.model_copy(update={"background_worker": True})
    async with MemoryManager.open(settings) as memory:
        # First: the facts its jobs write patch the users' slots, and a due rolling summary is written in the
        # job's own call, as in the application's process: the manager's own context builder, on its one pool
        # (closed after the manager's worker let running jobs finish). The worker started with the manager; a
        # job leased while this builder opens waits for it.
        await memory.context_builder()
        queue = await memory.queue_status()
        if queue.backend != "postgres":
            raise fail("the worker needs the Postgres queue: set MEMORY_DATABASE_URL to the application's database")
        if retry_dead:
            revived = await memory.retry_dead_jobs()
            out().print(f"{revived} dead jobs queued again")
            return 0
        out().print(f"worker running ({settings.background_concurrency} jobs at a time); Ctrl-C stops it")
        dead_at_start, last_read = queue.dead, time.monotonic()
        while True:
            await asyncio.sleep(settings.background_poll_seconds)
            if not drain:
                continue
            try:
                queue = await memory.queue_status()
            except StoreUnavailableError as exc:  # a starved pool or a database away: retried below the limit
                if time.monotonic() - last_read > DRAIN_UNREACHABLE_SECONDS:
                    raise fail(f"the database did not answer for {DRAIN_UNREACHABLE_SECONDS:.0f} s: {exc}") from None
                continue
            last_read = time.monotonic()
            if not queue.depth and not queue.deferred:  # deferred jobs become due once their users have room
                break
        died = queue.dead - dead_at_start
        if died > 0:
            err().print(f"[bold red]error:[/] {died} job(s) failed for good; `memory-plugin worker --retry-dead`")
            return DRAIN_JOBS_DIED
        return 0


@app.command("worker")
def worker_command(
    data_dir: DataDirOption = None,
    retry_dead: Annotated[
        bool, typer.Option("--retry-dead", help="Queue the dead jobs again (fresh attempts), then exit.")
    ] = False,
    drain: Annotated[bool, typer.Option("--drain", help="Exit once the queue is empty.")] = False,
) -> None:
    """Run memory work queued by applications (fact extraction) in this process, alongside or instead of their
    own workers (MEMORY_BACKGROUND_WORKER=false). Several workers share the queue; each job runs once. With
    --drain the exit code is 0 when the queue drained, 2 when jobs died meanwhile (see --retry-dead), 1 when
    the database could not be reached; a pool kept busy by the jobs themselves is not a failure."""
    code = run(_worker(load_settings(data_dir), retry_dead=retry_dead, drain=drain))
    if code:
        raise typer.Exit(code)


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
