"""`memory-plugin`: the command line (inspect, status, journal, worker, serve, db-url, stop, migrate, erase,
maintain, rotate-key, export, import, pause, reembed, token), plus the commands applications register
(`cli/plugins.py`; the machining shop's `demo` and `chat` from a checkout of this repository).

    memory-plugin inspect --user UUID       # what is stored about a user
    memory-plugin status                    # backend in use, database reachable, outage journal, job queue
    memory-plugin worker                    # run queued memory work (fact extraction) in this process
    psql "$(memory-plugin db-url)"          # open the database (the server stays up until `stop`)
    memory-plugin stop                      # stop the embedded database
    memory-plugin reembed                   # vectors of the current embedding model for every fact

Every command reads `MemorySettings` from `MEMORY_*` variables; `--data-dir DIR` means "the embedded
database in DIR" instead. Errors print one line on stderr and exit non-zero, without a traceback.

One module per concept: `common` (the app, console, settings, errors), `memory` (inspect, reembed), `status`
(status, journal), `services` (worker, serve), `database` (db-url, stop, migrate, erase, maintain), `keys`
(rotate-key), `transfer` (export, import, pause), `token` (development tokens for the REST API), `plugins`.
"""

from __future__ import annotations

import inspect
import re

from . import database, keys, memory, services, status, token, transfer
from .common import app
from .plugins import register_plugins

__all__ = ["app"]

_LIBRARY_MODULES = (database, keys, memory, services, status, token, transfer)  # imported for their commands


def _reflow(doc: str) -> str:
    """A docstring as help text: the lines of a paragraph joined (source wraps at 120 columns; the help
    wraps at the terminal's width: keeping both broke lines mid-sentence), paragraphs kept."""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(doc))
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


register_plugins(app)

for _command in app.registered_commands:
    if _command.help is None and _command.callback is not None and _command.callback.__doc__:
        _command.help = _reflow(_command.callback.__doc__)


if __name__ == "__main__":  # pragma: no cover
    app()
