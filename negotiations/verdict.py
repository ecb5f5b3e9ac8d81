"""What a negotiation Task settled on, computed from the Task alone.

``verify_agreement`` is the peer's agreement check (docs/wire-format.md#verdict); both
parties run it over the same Task and so reach the same verdict. ``settle`` is the agent-level
reading on top of it (docs/wire-format.md#settlement): it adds the ``unanswered`` case the Task state cannot
express and a prose fallback for moves without terms.

Pure: no Django, no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from negotiations.wire import Move, Role, TaskRecord, terms_equal

Status = Literal["open", "agreed", "declined", "conflict", "unconfirmed"]
Basis = Literal["prose", "state", "terms", "reference"]
Outcome = Literal["agreed", "declined", "conflict", "unconfirmed", "unanswered"]

# Weakest evidence first (docs/wire-format.md#basis-order).
BASIS_ORDER: tuple[Basis, ...] = ("prose", "state", "terms", "reference")

OPEN_STATES = frozenset({"submitted", "working", "input-required"})

# docs/wire-format.md#prose-fallback: a number right after a currency sign (one optional
# space), or right before a currency word. Digits and word boundaries are spelt out in ASCII
# because the peer's JavaScript regex reads \d and \b that way.
_AMOUNT = re.compile(
    r"[$€£]\s?([0-9][0-9,]*(?:\.[0-9]+)?)"
    r"|(?<![A-Za-z0-9_])([0-9][0-9,]*(?:\.[0-9]+)?)\s?"
    r"(?:euros?|dollars?|pounds?|usd|eur|gbp)(?![A-Za-z0-9_])",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Verdict:
    """Result of ``verify_agreement``: ``terms`` is set only when ``status`` is agreed (and
    then only if the agreed offer had terms); ``reason`` is a short lower-case explanation."""

    status: Status
    basis: Basis
    terms: dict[str, Any] | None
    reason: str


@dataclass(frozen=True)
class Settlement:
    """Result of ``settle``.

    ``outcome``, ``basis`` and ``terms`` are the same for both parties; ``reason`` (a sentence
    addressed to our side) and ``ended_by`` ("ours", "theirs", or "" while the task is open or
    has no readable move) are from our side's point of view. ``disputed`` is set only for a
    prose conflict: ``{"mine": [amounts], "theirs": [amounts]}``.
    """

    outcome: Outcome
    basis: Basis
    terms: dict[str, Any] | None
    reason: str
    ended_by: Literal["ours", "theirs", ""]
    disputed: dict[str, list[float]] | None = None


def verify_agreement(task: TaskRecord) -> Verdict:
    """The verdict on a Task, exactly as docs/wire-format.md#verdict, steps 1-7.

    1. submitted/working/input-required: open (state); any other state but completed:
       declined (state), reason "task ended as <state>".
    2. The decodable moves in history, in order: ``closing`` is the last, ``previous`` the one
       before.
    3. No moves: unconfirmed (state).
    4. ``closing.accepts_offer_id`` set: the first move whose ``offer_id`` matches is the offer.
       None: conflict (reference). Closing restates terms that differ: conflict (reference).
       Else agreed (reference) on the offer's terms.
    5. Both ``closing`` and ``previous`` carry terms and they differ: conflict (terms).
    6. ``closing`` carries terms: agreed (terms) on them.
    7. Else unconfirmed (state).

    Terms compare with ``terms_equal``; an empty terms object still counts as terms, as it does
    for the peer.
    """
    state = task.state
    if state in OPEN_STATES:
        return Verdict("open", "state", None, f"task is still {state}")
    if state != "completed":
        return Verdict("declined", "state", None, f"task ended as {state}")

    entries = [entry for entry in task.history if entry.move is not None]
    if not entries:
        return Verdict("unconfirmed", "state", None, "task completed without a readable move")
    moves = [entry.move for entry in entries if entry.move is not None]
    closing = moves[-1]
    previous = moves[-2] if len(moves) > 1 else None

    if closing.accepts_offer_id:
        offer_id = closing.accepts_offer_id
        closer = entries[-1].role
        made = [entry for entry in entries if entry.move is not None and entry.move.offer_id == offer_id]
        if not made:
            return Verdict(
                "conflict",
                "reference",
                None,
                f'closing move accepts offer "{offer_id}", which appears nowhere in the task',
            )
        # Beyond the seed: an offer id named twice binds nothing, and a side may name its own
        # offer only to confirm the other side's acceptance of it (the seed's confirmation);
        # otherwise a counterparty could make an offer and accept it itself, on our behalf.
        prior = entries[-2] if len(entries) > 1 else None
        confirms = (
            prior is not None
            and prior.role != closer
            and prior.move is not None
            and prior.move.accepts_offer_id == offer_id
        )
        if len(made) > 1 or (made[0].role == closer and not confirms):
            return Verdict(
                "conflict",
                "reference",
                None,
                f'closing move accepts offer "{offer_id}", which the other side neither made once '
                "nor accepted",
            )
        offer = made[0].move
        assert offer is not None
        if closing.terms is not None and not terms_equal(closing.terms, offer.terms):
            return Verdict(
                "conflict",
                "reference",
                None,
                f'closing move restates terms that differ from offer "{offer_id}"',
            )
        return Verdict("agreed", "reference", offer.terms, f'closing move accepts offer "{offer_id}"')

    if (
        closing.terms is not None
        and previous is not None
        and previous.terms is not None
        and not terms_equal(closing.terms, previous.terms)
    ):
        return Verdict(
            "conflict",
            "terms",
            None,
            "the last two moves name different terms and neither names the other's offer",
        )
    if closing.terms is not None:
        return Verdict("agreed", "terms", closing.terms, "closing move names terms")
    return Verdict(
        "unconfirmed",
        "state",
        None,
        "task completed, but the closing move carries no terms; send terms with every offer "
        "to make agreement verifiable",
    )


def prose_amounts(text: str) -> tuple[float, ...]:
    """Money amounts named in prose, per docs/wire-format.md#prose-fallback.

    A number (commas removed, decimals allowed) right after ``$``, ``€`` or ``£`` (one optional
    space), or right before euro(s)/dollar(s)/pound(s)/usd/eur/gbp, case-insensitive. Distinct
    values in order of first appearance: "€1,200 or 1200 euros" gives ``(1200.0,)``. A number
    too large for a double (it reads as infinity) is no amount.
    """
    found: list[float] = []
    for match in _AMOUNT.finditer(text):
        amount = float((match.group(1) or match.group(2)).replace(",", ""))
        if math.isfinite(amount) and amount not in found:
            found.append(amount)
    return tuple(found)


def _last_index(moves: Sequence[tuple[Role, Move]], role: Role) -> int | None:
    return next((i for i in range(len(moves) - 1, -1, -1) if moves[i][0] == role), None)


def _other(role: Role) -> Role:
    return "agent" if role == "user" else "user"


def _amounts_text(amounts: Sequence[float]) -> str:
    return "/".join(json.dumps(int(a) if a.is_integer() else a) for a in amounts)


def _sentence(reason: str) -> str:
    return reason[0].upper() + reason[1:] + "."


def _unanswered(
    moves: Sequence[tuple[Role, Move]],
    our_role: Role,
    terminal_actions: frozenset[str],
) -> Settlement | None:
    """docs/wire-format.md#settlement, open task: a side closed and the other did not close too."""
    last_at = {role: _last_index(moves, role) for role in (our_role, _other(our_role))}
    closers = [at for at in last_at.values() if at is not None and moves[at][1].action in terminal_actions]
    if not closers:
        return None
    # If both last moves are terminal, the earlier one is the close and the later one its
    # reply; deciding by position rather than by our_role keeps both sides' views consistent.
    closed_at = min(closers)
    closer_role, closing = moves[closed_at]
    other_at = last_at[_other(closer_role)]
    reply = moves[other_at][1] if other_at is not None and other_at > closed_at else None

    closer, replier = ("You", "they") if closer_role == our_role else ("They", "you")
    if reply is None:
        reason = f'{closer} closed with "{closing.action}", but {replier} sent no readable reply.'
    else:
        reason = (
            f'{closer} closed with "{closing.action}", but {replier} replied with '
            f'"{reply.action}" rather than closing too.'
        )
    return Settlement("unanswered", "state", None, reason, ended_by="")


def settle(
    task: TaskRecord,
    *,
    our_role: Role,
    terminal_actions: frozenset[str],
) -> Settlement | None:
    """Our side's settlement of a Task, per docs/wire-format.md#settlement.

    ``our_role`` is the A2A role our messages carry in this Task ("user" when we sent the
    request, "agent" when we answered it); "mine"/"theirs" below are the last decodable moves
    of each role. On the ``verify_agreement`` verdict:

    - open: None if neither last move is in ``terminal_actions``; else unanswered (state).
    - unconfirmed: prose fallback. If both last moves name amounts (``prose_amounts``) and none
      is shared: conflict (prose) with ``disputed``; else unconfirmed (state).
    - agreed, declined, conflict: passed through with basis and terms.

    Outcome, basis and terms never depend on ``our_role``, so both parties agree on them.
    """
    verdict = verify_agreement(task)
    moves = [(entry.role, entry.move) for entry in task.history if entry.move is not None]
    if verdict.status == "open":
        return _unanswered(moves, our_role, terminal_actions)

    ended_by: Literal["ours", "theirs", ""] = ""
    if moves:
        ended_by = "ours" if moves[-1][0] == our_role else "theirs"

    if verdict.status == "unconfirmed":
        mine_at, theirs_at = _last_index(moves, our_role), _last_index(moves, _other(our_role))
        mine = prose_amounts(moves[mine_at][1].message) if mine_at is not None else ()
        theirs = prose_amounts(moves[theirs_at][1].message) if theirs_at is not None else ()
        if mine and theirs and not set(mine) & set(theirs):
            return Settlement(
                "conflict",
                "prose",
                None,
                f"You named {_amounts_text(mine)} and they named {_amounts_text(theirs)}: no "
                "amount in common, so this is not an agreement.",
                ended_by=ended_by,
                disputed={"mine": list(mine), "theirs": list(theirs)},
            )
        return Settlement("unconfirmed", verdict.basis, None, _sentence(verdict.reason), ended_by=ended_by)

    return Settlement(
        verdict.status, verdict.basis, verdict.terms, _sentence(verdict.reason), ended_by=ended_by
    )
