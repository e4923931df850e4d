"""What a client may put in a chat's history through the API, and nothing else.

A chat's history is later given to a model as what was said, so a client may send only what a person or the
assistant said:

- plain turns `{role: user|assistant, content}`;
- pydantic-ai messages made of user prompts (text, and file URLs on public hosts) and assistant text;
- tool exchanges, under one rule: a `tool-return` must answer a `tool-call` sent earlier in the same request
  (same `tool_call_id` and `tool_name`), so a client can record a tool exchange its own agent ran but cannot
  plant a tool result the model never asked for.

Everything else is refused with 422 before anything is stored: system prompts and `instructions` (they would
steer every later model call), compaction parts (they replace the history the model sees), thinking, retry,
built-in tool, file and capability parts, binary uploads, and URLs that point at a non-public host (loopback,
private and link-local ranges such as the cloud metadata address 169.254.169.254, `localhost`, single-label
names; a model provider or a tool fetching them would read the server's own network). Text holding a NUL or an
unpaired surrogate (neither can be stored as UTF-8 in Postgres) is refused with 422 `invalid_text`.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from .messages import plain_error
from .schemas import SimpleTurn, Turn

__all__ = ["TurnRefused", "check_text", "client_turns", "non_public_host"]

_REQUEST_PARTS = frozenset({"user-prompt", "tool-return"})
_RESPONSE_PARTS = frozenset({"text", "tool-call"})
# Host names that only mean something inside a network.
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa", ".intranet", ".corp")
# Legacy IPv4 spellings `inet_aton` accepts: "2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "127.1".
_NUMERIC_HOST = re.compile(r"^(?:0x[0-9a-f]+|[0-9]+)(?:\.(?:0x[0-9a-f]+|[0-9]+)){0,3}$")


class TurnRefused(Exception):
    """A turn the API does not store: `code` for a program, `message` (which turn, why, what to send) for a
    person. Answered with 422."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def non_public_host(url: str) -> str | None:
    """Why `url` may not be stored (a sentence), or None when it is an http(s) URL on a public host.

    Judged on the URL as written, without resolving names: literal addresses in loopback, private, link-local,
    shared or reserved ranges (in any spelling `inet_aton` accepts, and IPv4 inside IPv6), `localhost` and other
    local-only names are refused."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").rstrip(".").lower()
    except ValueError:
        return "is not a valid URL"
    if parts.scheme.lower() not in ("http", "https"):
        return f"uses the scheme {parts.scheme or '(none)'!r}: only http and https URLs are accepted"
    if not host:
        return "has no host"
    address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if _NUMERIC_HOST.match(host):
            try:
                address = ipaddress.IPv4Address(socket.inet_aton(host))
            except OSError:
                return "has a malformed numeric host"
    if address is not None:
        mapped = getattr(address, "ipv4_mapped", None) or getattr(address, "sixtofour", None)
        if not address.is_global or (mapped is not None and not mapped.is_global):
            return f"points at {address}, an address that is not public"
        return None
    if host == "localhost" or host.endswith(_LOCAL_SUFFIXES) or "." not in host:
        return f"points at {host!r}, a host name that is not public"
    return None


def check_text(value: Any, where: str) -> None:
    """Refuse (`invalid_text`) a NUL character or an unpaired surrogate in any string of `value` (a JSON value)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise TurnRefused("invalid_text", f"{where} holds a NUL character (\\u0000): remove it")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TurnRefused(
                "invalid_text",
                f"{where} holds an unpaired surrogate ({value[exc.start]!r}): send valid UTF-8 text",
            ) from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, where)
            check_text(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_text(item, f"{where}[{index}]")


def _check_urls(value: Any, where: str) -> None:
    """Refuse (`url_refused`) any `url` field of `value` (a JSON value) that `non_public_host` refuses."""
    if isinstance(value, dict):
        url = value.get("url")
        if isinstance(url, str) and (why := non_public_host(url)) is not None:
            raise TurnRefused("url_refused", f"{where}.url {why}")
        for key, item in value.items():
            _check_urls(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_urls(item, f"{where}[{index}]")


def _check_message(message: ModelMessage, where: str, calls: set[tuple[str, str]]) -> None:
    """Refuse what `message` may not hold (module docstring); `calls`: the tool calls seen so far."""
    allowed = _REQUEST_PARTS if isinstance(message, ModelRequest) else _RESPONSE_PARTS
    if isinstance(message, ModelRequest) and message.instructions:
        raise TurnRefused("turn_refused", f"{where}.instructions: a client may not send instructions; remove them")
    for index, part in enumerate(message.parts):
        kind = part.part_kind
        here = f"{where}.parts[{index}]"
        if kind not in allowed:
            side = "request" if isinstance(message, ModelRequest) else "response"
            raise TurnRefused(
                "turn_refused",
                f"{here} is a {kind!r} part in a {side}: a client may send user prompts, assistant text and tool"
                " calls with their returns only",
            )
        if kind == "tool-call":
            calls.add((str(getattr(part, "tool_call_id", "")), str(getattr(part, "tool_name", ""))))
        elif kind == "tool-return":
            call = (str(getattr(part, "tool_call_id", "")), str(getattr(part, "tool_name", "")))
            if call not in calls:
                raise TurnRefused(
                    "turn_refused",
                    f"{here} returns {call[1]!r} ({call[0]!r}) but no tool-call with that id and name comes"
                    " before it in this request: send the call and its return together",
                )
        elif isinstance(part, UserPromptPart) and not isinstance(part.content, str):
            for item_index, item in enumerate(part.content):
                if not isinstance(item, str) and not hasattr(item, "url"):
                    raise TurnRefused(
                        "turn_refused",
                        f"{here}.content[{item_index}] is {type(item).__name__}: send text or a URL on a public host",
                    )


def client_turns(raw: Sequence[Turn]) -> list[ModelMessage]:
    """The messages to store for turns a client sent, or `TurnRefused` for the first one it may not send.

    Plain turns become a user request or an assistant response; other entries must be pydantic-ai messages
    holding only what the module docstring allows."""
    out: list[ModelMessage] = []
    calls: set[tuple[str, str]] = set()
    for index, turn in enumerate(raw):
        where = f"turns[{index}]"
        if isinstance(turn, SimpleTurn):
            check_text(turn.content, f"{where}.content")
            if turn.role == "user":
                out.append(ModelRequest(parts=[UserPromptPart(turn.content)]))
            else:
                out.append(ModelResponse(parts=[TextPart(turn.content)]))
            continue
        check_text(turn, where)
        if "kind" not in turn and "role" in turn:  # meant as a plain turn: say what is wrong with it
            try:
                SimpleTurn.model_validate(turn)
            except ValidationError as exc:
                raise TurnRefused("invalid_turn", plain_error(exc.errors()[0], ("turns", index))) from exc
        _check_urls(turn, where)
        try:
            messages = ModelMessagesTypeAdapter.validate_python([turn])
        except ValidationError as exc:
            first = exc.errors()[0]
            raise TurnRefused(
                "invalid_turn",
                f"{where} is neither {{role, content}} nor a pydantic-ai message: {first['msg']} at"
                f" {'.'.join(map(str, first['loc']))}",
            ) from exc
        for message in messages:
            _check_message(message, where, calls)
        out.extend(messages)
    return out
