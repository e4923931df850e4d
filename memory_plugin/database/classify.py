"""Which psycopg failures mean "the database is unreachable" and which mean "this statement was refused".

Only the first is an outage: `ResilientStore` journals the write and replays it when the database answers.
The second is the statement's own fault (too slow for `statement_timeout`, too big, invalid data): replaying
it fails the same way, so it is raised to the caller (`StatementLimitError` naming the limit, or
`StoreError`) and never acknowledged. Before this split every `OperationalError` was an outage, and
`QueryCanceled` is one: a 1,500-note write that outlasted the 5 s `statement_timeout` was acknowledged,
journaled, and timed out on every replay, forever, blocking the user's later writes.
"""

from __future__ import annotations

import psycopg
from psycopg_pool import PoolTimeout

from ..errors import StatementLimitError, StoreError, StoreUnavailableError

__all__ = ["is_unreachable", "store_error"]

# SQLSTATEs of a server that is going away or cannot take the session now; class 08 (connection exception)
# is matched by prefix. A client-side failure (refused, reset, closed mid-query) has no SQLSTATE at all.
_UNREACHABLE = {
    "57P01": "admin_shutdown",
    "57P02": "crash_shutdown",
    "57P03": "cannot_connect_now",
    "57P05": "idle_session_timeout",
    "53300": "too_many_connections",
    "53100": "disk_full",  # nothing can be written until an operator frees space: keep the write for later
    "58030": "io_error",
}
# Class 40 (serialization failure, deadlock): the transaction was rolled back and the same statement succeeds
# when sent again, which is exactly what a journal replay does; treated as a transient outage.
_TRANSIENT_CLASS = "40"
# SQLSTATEs that stop one statement for its duration or size; class 54 (program limit exceeded: statement
# too complex, too many columns or arguments) is matched by prefix.
_STATEMENT_LIMITS = {
    "57014": "statement_timeout",  # query_canceled: the statement timeout, or a cancel request
    "55P03": "lock_timeout",
    "53200": "out_of_memory",
    "53400": "configuration_limit_exceeded",
}


def is_unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached now (an outage), not that it refused a statement."""
    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith(("08", _TRANSIENT_CLASS)) or state in _UNREACHABLE


def store_error(exc: psycopg.Error | PoolTimeout, doing: str) -> StoreError:
    """The plugin's error for a psycopg failure while `doing`: `StoreUnavailableError` (an outage),
    `StatementLimitError` (reachable, but this statement is over a limit) or `StoreError` (refused)."""
    if isinstance(exc, PoolTimeout):
        return StoreUnavailableError(f"no Postgres connection available for {doing}: {exc}")
    if is_unreachable(exc):
        return StoreUnavailableError(f"Postgres is unreachable: {exc}")
    state = exc.sqlstate or ""
    limit = _STATEMENT_LIMITS.get(state) or ("program_limit_exceeded" if state.startswith("54") else None)
    if limit == "statement_timeout" and "statement timeout" not in str(exc):
        limit = "query_canceled"  # cancelled by an operator or the client, not by the timeout
    if limit is not None:
        # The primary message only: the full one carries the whole statement as context (kilobytes of SQL).
        said = exc.diag.message_primary or str(exc).strip().partition("\n")[0]
        return StatementLimitError(
            f"Postgres stopped {doing} at its {limit} limit ({said}): the database is reachable, and"
            " sending the same statement again fails the same way; write fewer items per call, or raise the"
            f" limit (the role's {limit} setting)",
            limit=limit,
        )
    return StoreError(f"Postgres rejected {doing}: {exc}")
