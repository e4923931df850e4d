"""Payment card numbers: runs of digit groups in the shapes cards are written in, Luhn-valid, issuer digits
2-6, never a list of round quantities."""

from __future__ import annotations

import functools
import re
import string

from .scan import _SPACES, _byte_class, _has_run, _placeholder, _replaced

# --- payment cards ----------------------------------------------------------------------------------------------
# A run of digit groups, each separated by one to three spaces (any of `_SPACES`), a dash, a dot or a slash.
# Possessive: the run is read once, never backtracked into. Letters around it do not matter ("visa4111…").
_SEPARATOR = r"(?:[" + _SPACES + r"]{1,3}+|[-./])"
# The look-ahead asks for 13 characters of digits and separators before the run is handed to Python: short
# numbers (quantities, dates, phone numbers) never cost a callback. (A look-ahead counting 13 digits across
# separators cost 4 ms per 20,000 characters of "SSN 123 45 678"; this one is a single character class.)
# The first digit comes before the look-ahead so the engine skips to the next digit in C instead of trying
# every position (20,000 characters of prose: ~0.05 ms instead of ~0.4).
_DIGIT_RUN = re.compile(r"\d(?=[\d" + _SPACES + r"./-]{12})\d*+(?:" + _SEPARATOR + r"\d++)*+")
# A run of more than this many groups is a table of figures ("Cotas 100 200 … 800", a price list): not searched.
# Cards are written in at most 5 groups; 12 leaves room for a reference before and an expiry and CVV after.
_MAX_CARD_RUN_GROUPS = 12
_GROUP_SPLIT = re.compile(r"(\d++)")
# How card numbers are grouped when written: every group of four with a shorter last one (13–19 digits: Visa,
# Mastercard, Discover, Maestro), 4-6-5 (American Express) and 4-6-4 (Diners), or one block.
_CARD_SHAPES: tuple[tuple[int, ...], ...] = (
    (4, 4, 4, 4, 3),
    (4, 4, 4, 4, 2),
    (4, 4, 4, 4, 1),
    (4, 4, 4, 4),
    (4, 6, 5),
    (4, 6, 4),
    (4, 4, 4, 3),
    (4, 4, 4, 2),
    (4, 4, 4, 1),
)
# Issuers' major industry identifiers 2–6 (Mastercard 2/5, Amex/Diners/JCB 3, Visa 4, Discover/Maestro/UnionPay
# 6): a Luhn-valid number starting with 0, 1, 7, 8 or 9 is an airline, fuel or health id, or a part number.
_CARD_FIRST_DIGITS = frozenset("23456")


# Each digit doubled and its digits summed (2d or 2d - 9) is again one digit: a byte translation table, so the
# sum runs over bytes in C.
_LUHN_DOUBLED = bytes.maketrans(b"0123456789", "".join(str(2 * d if d < 5 else 2 * d - 9) for d in range(10)).encode())


def _luhn_valid(digits: str) -> bool:
    """ISO/IEC 7812 check digit: double every second digit from the right, the sum must end in 0."""
    if not digits.isascii():
        digits = "".join(str(int(c)) for c in digits)  # other scripts' digits ("٤١١١…") as ASCII
    encoded = digits.encode()
    total = sum(encoded[-1::-2]) + sum(encoded[-2::-2].translate(_LUHN_DOUBLED)) - 48 * len(encoded)
    return total % 10 == 0


_DIGIT_RUN_BYTES = _byte_class(string.digits + _SPACES + "./-", non_ascii=True)


def _separator_class(separator: str) -> str:
    """Spaces of any kind and count are one class; a dash, a dot and a slash are each their own."""
    return separator if len(separator) == 1 and separator in "-./" else " "


# Per group, the shape ends that may start there (None: too few digits left); and the groups where some may.
_Plan = tuple[tuple[tuple[int, ...] | None, ...], tuple[int, ...]]
# The plans of the run shapes seen so far (a dict lookup costs less than a cached call); at most `_MAX_PLANS`.
_PLANS: dict[tuple[int, ...], _Plan] = {}
_MAX_PLANS = 4_096


def _run_plan(lengths: tuple[int, ...]) -> _Plan:
    """What may start at each group of a run whose groups have these lengths: None when fewer than 13 digits
    remain from it (no card starts there or later), else the index of the last group of each card shape that
    fits there, longest first: `(i,)` for a single 13–19 digit block, `()` for none. Then the groups where
    something may start.

    Tries the fixed `_CARD_SHAPES` (longest first), then a single 13–19 digit block: a constant number of checks
    per group, so a run of n groups costs O(n), where trying every span of groups cost O(n²) Luhn checks. The
    plan depends on the lengths alone (a handful of shapes in practice), so it is worked out once per shape."""
    plan: list[tuple[int, ...] | None] = []
    for i, length in enumerate(lengths):
        if sum(lengths[i:]) < 13:
            plan.append(None)
        elif 13 <= length <= 19:
            plan.append((i,))
        elif length != 4 or i + 2 >= len(lengths) or lengths[i + 1] not in (4, 6):
            plan.append(())  # every grouped shape starts with 4 then 4 or 6 digits, and has at least 3 groups
        else:
            plan.append(tuple(i + len(shape) - 1 for shape in _shapes_starting(lengths[i : i + 5])))
    result = (tuple(plan), tuple(i for i, ends in enumerate(plan) if ends))
    if len(_PLANS) < _MAX_PLANS:
        _PLANS[lengths] = result
    return result


def _card_at(pieces: list[str], separators: list[str], i: int, ends: tuple[int, ...], uniform: bool) -> int | None:
    """The index of the last group of a card number starting at group `i` (trying the shape ends `ends` of
    `_run_plan`), or None. `uniform`: every separator of the run is the same."""
    if not ends or pieces[i][0] not in _CARD_FIRST_DIGITS:
        return None
    if ends[0] == i:
        return i if _luhn_valid(pieces[i]) else None
    for j in ends:
        between = separators[i:j]
        if not uniform and len(set(between)) > 1 and len({_separator_class(sep) for sep in between}) != 1:
            continue  # "4111 1111-1111.1111": mixed separators are a list of numbers, not one card
        card = pieces[i : j + 1]
        if _luhn_valid("".join(card)) and not _round_groups(card):
            return j
    return None


@functools.cache
def _shapes_starting(lengths: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The card shapes (longest first) that the group lengths `lengths` begin with; cached per tuple."""
    return tuple(shape for shape in _CARD_SHAPES if lengths[: len(shape)] == shape)


def _round_groups(pieces: list[str]) -> bool:
    """Quantities such as "2000 3000 4000 5000" (every group ending in 00): Luhn-valid by chance one time in ten,
    a real card's groups all end in 00 one time in 10⁸."""
    return len(pieces) > 1 and all(piece.endswith("00") for piece in pieces)


def _redact_cards(text: str) -> tuple[str, bool]:
    if not _has_run(text, _DIGIT_RUN_BYTES, 13):
        return text, False

    def cards(match: re.Match[str]) -> str | None:
        run = match.group()
        return _cards_in_run(run) if _may_hold_card(run) else None

    # Most runs are not cards (a table of figures, part numbers): they return None and cost no string building.
    redacted = _replaced(text, _DIGIT_RUN.finditer(text), cards)
    return redacted, redacted is not text


# A run's shape: each ASCII digit as "d", the separators as written ("dddd dddd-dd"). Runs of one shape have
# the same groups, the same card candidates and the same separator checks, so those are worked out once per
# shape (`_shape_checks`) and a run costs a dict lookup and its checksums.
_SHAPE_DIGITS = bytes.maketrans(b"0123456789", b"dddddddddd")
# Longer runs (rare: tables of figures) take the general path, so the cached shapes stay small.
_MAX_SHAPE_CHARS = 64
# Per group where a card may start: the offset of its first digit, and each candidate card as the offsets of its
# digits, the separator characters to delete between them, and the offsets where its groups end (None for a
# single 13-19 digit block, which is never taken for round quantities).
_Candidate = tuple[int, int, str, tuple[int, ...] | None]
_ShapeChecks = tuple[tuple[int, tuple[_Candidate, ...]], ...]
_SHAPES: dict[bytes, _ShapeChecks] = {}


def _may_hold_card(run: str) -> bool:
    """False when no card number can be in `run`: each candidate of its shape fails Luhn or is a list of round
    quantities. True when one passes (`_cards_in_run` then rewrites the run) or the run is not plain ASCII or
    too long to look up by shape. The same checks as `_card_at`, without splitting the run."""
    if len(run) > _MAX_SHAPE_CHARS or not run.isascii():
        return True
    shape = run.encode().translate(_SHAPE_DIGITS)
    checks = _SHAPES.get(shape)
    if checks is None:
        checks = _shape_checks(shape.decode())
        if len(_SHAPES) < _MAX_PLANS:
            _SHAPES[shape] = checks
    for first, candidates in checks:
        if run[first] not in _CARD_FIRST_DIGITS:
            continue
        for start, end, delete, group_ends in candidates:
            digits = run[start:end]
            for char in delete:
                digits = digits.replace(char, "")
            if _luhn_valid(digits) and (group_ends is None or not all(run[e - 2 : e] == "00" for e in group_ends)):
                return True
    return False


def _shape_checks(shape: str) -> _ShapeChecks:
    """The card candidates of every run of this shape (see `_SHAPES`), in the order `_cards_in_run` tries them."""
    split = _split_run(shape.replace("d", "0"))
    if split is None:
        return ()  # more groups than a card run holds: no card
    pieces, separators, uniform = split
    lengths = tuple(map(len, pieces))
    ends_at, starts = _PLANS.get(lengths) or _run_plan(lengths)
    offsets = [0]
    for length, separator in zip(lengths, separators, strict=False):
        offsets.append(offsets[-1] + length + len(separator))
    checks: list[tuple[int, tuple[_Candidate, ...]]] = []
    for i in starts:
        candidates: list[_Candidate] = []
        for j in ends_at[i] or ():
            if j == i:  # one 13-19 digit block
                candidates.append((offsets[i], offsets[i] + lengths[i], "", None))
                continue
            between = separators[i:j]
            if not uniform and len(set(between)) > 1 and len({_separator_class(sep) for sep in between}) != 1:
                continue  # mixed separators: never a card
            ends = tuple(offsets[k] + lengths[k] for k in range(i, j + 1))
            candidates.append((offsets[i], ends[-1], "".join(sorted(set("".join(between)))), ends))
        checks.append((offsets[i], tuple(candidates)))
    return tuple(checks)


def _split_run(run: str) -> tuple[list[str], list[str], bool] | None:
    """A run's digit groups, the separators between them and whether those are all one single space; None when
    it has more groups than a card run may hold (`_MAX_CARD_RUN_GROUPS`)."""
    if "  " not in run and run.replace(" ", "").isdigit():
        # Groups between single spaces, the way people write cards: a plain split (~0.3 µs instead of ~0.8).
        pieces = run.split(" ", _MAX_CARD_RUN_GROUPS)
        if len(pieces) > _MAX_CARD_RUN_GROUPS:
            return None
        return pieces, [" "] * (len(pieces) - 1), True
    # A split on a capturing digit pattern gives ["", group, separator, group, …, group, ""] in one call; it stops
    # after one group more than a card run may hold (then the last item is the rest of the run).
    parts = _GROUP_SPLIT.split(run, _MAX_CARD_RUN_GROUPS + 1)
    if len(parts) > 2 * _MAX_CARD_RUN_GROUPS + 1:
        return None
    return parts[1::2], parts[2:-1:2], False


def _cards_in_run(run: str) -> str | None:
    """`run` (digit groups and separators) with each card number in it replaced, or None when it holds none."""
    split = _split_run(run)
    if split is None:
        return None
    pieces, separators, uniform = split
    lengths = tuple(map(len, pieces))
    ends_at, starts = _PLANS.get(lengths) or _run_plan(lengths)
    # Most runs hold no card: only the groups where a card may start are tried, and the first card found starts
    # the left-to-right walk (every group before it stays as written).
    for i in starts:
        if pieces[i][0] in _CARD_FIRST_DIGITS:
            last = _card_at(pieces, separators, i, ends_at[i] or (), uniform)
            if last is not None:
                return _with_cards(pieces, separators, uniform, ends_at, i, last)
    return None


def _with_cards(
    pieces: list[str],
    separators: list[str],
    uniform: bool,
    ends_at: tuple[tuple[int, ...] | None, ...],
    first: int,
    first_last: int,
) -> str:
    """The run with its cards replaced, the first being groups `first`..`first_last`."""
    out = [piece for k in range(first) for piece in (pieces[k], separators[k])]
    out.append(_placeholder("payment_card"))
    if first_last < len(separators):
        out.append(separators[first_last])
    i = first_last + 1
    # Left to right: a reference number or a year next to the card ("ref 12 4111 1111 1111 1111") does not
    # hide it.
    while i < len(pieces):
        ends = ends_at[i]
        if ends is None:
            break  # fewer than 13 digits left
        # The cheap part of `_card_at` first: most groups cannot start a card.
        last = _card_at(pieces, separators, i, ends, uniform) if ends and pieces[i][0] in _CARD_FIRST_DIGITS else None
        if last is None:
            out.append(pieces[i])
            last = i
        else:
            out.append(_placeholder("payment_card"))
        if last < len(separators):
            out.append(separators[last])
        i = last + 1
    return "".join(out) + _rest(pieces, separators, i)


def _rest(pieces: list[str], separators: list[str], i: int) -> str:
    """The groups from `i` on, with the separators between them, as written."""
    if i >= len(pieces):
        return ""
    tail = [pieces[i]]
    for k in range(i + 1, len(pieces)):
        tail.append(separators[k - 1])
        tail.append(pieces[k])
    return "".join(tail)
