"""An Index Network-style negotiating agent, both ends, re-implemented from docs/wire-format.md#index-peers.

Our own code, written from docs/wire-format.md alone (the wire format, the outcome
artifact, ``ask``, the card), so our side can be tested against
what an ``@indexnetwork/a2a`` peer does on the wire:

* :class:`IndexPeer` — the SERVER (``createA2AHandler``): a lenient card at the
  origin root, any POST path is JSON-RPC ``message/send`` (A2A 0.3 shapes, no
  ``kind`` on tasks or messages), full history with the reply last, the state
  stamped from its own reply, 404/-32001 for an unknown task and 409/-32002 for
  a finished one. Its strategy is :class:`ScriptedSeller`.
* :class:`IndexClient` — the CLIENT (``A2ANegotiationClient``): ``message/send``
  to the URL exactly as given, one data part, no ids on the first turn, the
  reply read from ``history[-1]``, turns counted as our ``role:"user"``
  messages; non-2xx replies and JSON-RPC errors raise :class:`IndexClientError`.
  Its strategy is :class:`ScriptedBuyer`.

A move is ``{"action", "message", "terms"?, "offerId"?, "acceptsOfferId"?}``;
both strategies mint an ``offerId`` for every move with terms, accepts included.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from negotiations.verdict import verify_agreement
from negotiations.wire import task_record_from_json
from tests.loopback import LoopbackServer

# The actions that end a task by default (docs/wire-format.md#index-peers).
TERMINAL_ACTIONS = frozenset({"accept", "reject", "decline", "withdraw"})
TERMINAL_STATES = frozenset({"completed", "failed", "canceled", "rejected"})
OUTCOME_ARTIFACT_ID = "negotiator:negotiation-outcome"
SEND_TIMEOUT = 180.0  # the Index client's default deadline for one send (docs/wire-format.md#index-peers)


def terminal_state(action: str) -> str:
    """The state a terminal reply stamps: accept→completed, withdraw→canceled, else rejected."""
    return {"accept": "completed", "withdraw": "canceled"}.get(action, "rejected")


def read_move(message: dict[str, Any]) -> dict[str, Any] | None:
    """The move of a message: the first ``kind=="data"`` part whose ``data.action`` and
    ``data.message`` are strings (docs/wire-format.md#reading-a-move); None when it is undecodable."""
    for part in message.get("parts") or []:
        data = part.get("data") if isinstance(part, dict) and part.get("kind") == "data" else None
        if (
            isinstance(data, dict)
            and isinstance(data.get("action"), str)
            and isinstance(data.get("message"), str)
        ):
            return data
    return None


@dataclass(frozen=True)
class Seen:
    """One message of a task from one side's viewpoint (docs/wire-format.md#history)."""

    outgoing: bool
    move: dict[str, Any] | None


def view(task: dict[str, Any], *, own_role: str) -> list[Seen]:
    """The task's history as ``own_role`` ("agent" on the server, "user" on the client) sees it."""
    return [Seen(m.get("role") == own_role, read_move(m)) for m in task["history"]]


class Strategy(Protocol):
    def decide(self, seen: list[Seen]) -> dict[str, Any]:
        """The next move, given the history as this side sees it."""
        ...


def offer(action: str, message: str, amount: float, currency: str) -> dict[str, Any]:
    """A move with terms ``{amount, currency}`` and a fresh ``offerId``."""
    terms = {"amount": amount, "currency": currency}
    return {"action": action, "message": message, "terms": terms, "offerId": str(uuid.uuid4())}


def amount_of(move: dict[str, Any], currency: str) -> float | None:
    """The amount a move offers in ``currency``, or None when it offers none there."""
    terms = move.get("terms")
    if not isinstance(terms, dict) or terms.get("currency", currency) != currency:
        return None
    amount = terms.get("amount")
    return float(amount) if isinstance(amount, int | float) and not isinstance(amount, bool) else None


def confirmation(seen: list[Seen], theirs: dict[str, Any]) -> dict[str, Any] | None:
    """Our ``accept`` confirming their accept of one of our offers, with that offer's terms."""
    ours = {s.move["offerId"]: s.move for s in seen if s.outgoing and s.move and s.move.get("offerId")}
    accepted = ours.get(theirs.get("acceptsOfferId", ""))
    if accepted is None:
        return None
    return {
        "action": "accept",
        "message": "Confirmed.",
        "terms": accepted["terms"],
        "offerId": str(uuid.uuid4()),
        "acceptsOfferId": theirs["acceptsOfferId"],
    }


@dataclass
class ScriptedSeller:
    """Counters at ``asking`` until offered at least ``floor``, then accepts that offer by its id.

    With ``ask_once`` it first replies ``ask`` (a question for its own party, no
    terms), which an Index handler sends over the wire as an open reply (docs/wire-format.md#vocabulary).
    A closing move of theirs is answered in kind: reject with reject, an accept
    of one of our offers with a confirming accept.
    """

    floor: float = 1000
    asking: float = 1200
    currency: str = "EUR"
    ask_once: bool = False

    def decide(self, seen: list[Seen]) -> dict[str, Any]:
        theirs = next((s.move for s in reversed(seen) if not s.outgoing and s.move), None)
        if theirs is None:
            return self._counter()
        if theirs["action"] in TERMINAL_ACTIONS - {"accept"}:
            return {"action": "reject", "message": "Understood. Thank you for your time."}
        if theirs["action"] == "accept" and (confirmed := confirmation(seen, theirs)):
            return confirmed
        if self.ask_once and not any(s.outgoing and s.move and s.move["action"] == "ask" for s in seen):
            return {"action": "ask", "message": "Does Idris take on two days a month at this stage?"}
        amount = amount_of(theirs, self.currency)
        if amount is not None and amount >= self.floor and isinstance(theirs.get("offerId"), str):
            return {
                "action": "accept",
                "message": f"Agreed at €{amount:,.0f} a day.",
                "terms": theirs["terms"],
                "offerId": str(uuid.uuid4()),
                "acceptsOfferId": theirs["offerId"],
            }
        return self._counter()

    def _counter(self) -> dict[str, Any]:
        return offer("counter", f"My rate is €{self.asking:,.0f} a day.", self.asking, self.currency)


@dataclass
class ScriptedBuyer:
    """Proposes ``opening``, raises by ``step`` up to ``ceiling``; accepts an offer within it.

    Their ``ask`` is answered by restating our last offer.
    """

    opening: float = 800
    step: float = 100
    ceiling: float = 1100
    currency: str = "EUR"

    def decide(self, seen: list[Seen]) -> dict[str, Any]:
        mine = [s.move for s in seen if s.outgoing and s.move]
        theirs = next((s.move for s in reversed(seen) if not s.outgoing and s.move), None)
        if not mine:
            return offer("propose", f"I can pay €{self.opening:,.0f} a day.", self.opening, self.currency)
        if theirs is not None and theirs["action"] == "accept" and (confirmed := confirmation(seen, theirs)):
            return confirmed
        last = amount_of(mine[-1], self.currency) or self.opening
        if theirs is not None and theirs["action"] == "ask":
            return offer("counter", f"As I said, €{last:,.0f} a day.", last, self.currency)
        asked = amount_of(theirs, self.currency) if theirs is not None else None
        if theirs is not None and asked is not None and asked <= self.ceiling and theirs.get("offerId"):
            return {
                "action": "accept",
                "message": f"Agreed at €{asked:,.0f} a day.",
                "terms": theirs["terms"],
                "offerId": str(uuid.uuid4()),
                "acceptsOfferId": theirs["offerId"],
            }
        raised = min(self.ceiling, last + self.step)
        return offer("counter", f"I can pay €{raised:,.0f} a day.", raised, self.currency)


def rpc_error(status: int, code: int, message: str, request_id: Any = None) -> JSONResponse:
    return JSONResponse(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}, status_code=status
    )


@dataclass(frozen=True)
class Received:
    """One POST as the peer got it."""

    path: str
    body: Any


class IndexPeer(LoopbackServer):
    """An Index-style agent server (``createA2AHandler``), on loopback in a thread of the test process.

    ``url`` is the address handed out (the origin plus ``path``: any POST path is
    the endpoint, but the card sits at the origin root only). ``card`` is the
    card as served, its ``url`` "" as when the host sets no identity URL; tests
    may edit it before the peer starts. With ``walk_away_after=n`` its side
    closes a task (state ``canceled``) right after its n-th reply there, without
    saying so, as when its host ends it out of band.
    """

    what = "the Index-style peer"

    def __init__(
        self, strategy: Strategy | None = None, *, path: str = "/idris", walk_away_after: int | None = None
    ) -> None:
        super().__init__()
        self.strategy = strategy or ScriptedSeller()
        self.url = self.origin + path
        self.walk_away_after = walk_away_after
        self.tasks: dict[str, dict[str, Any]] = {}
        self.received: list[Received] = []
        self.card: dict[str, Any] = {
            "name": "Idris Haddad",
            "id": "index:user:idris",
            "url": "",
            "description": "Fractional CFO.",
            "version": "0.1.0",
            "capabilities": {},
            "skills": [
                {
                    "id": "negotiate",
                    "name": "Negotiate",
                    "description": "Negotiates on its party's behalf over A2A message/send. "
                    "Understands: propose, counter, accept, reject.",
                }
            ],
        }
        app = Starlette(routes=[Route("/{path:path}", self.serve, methods=["GET", "POST", "PUT", "DELETE"])])
        self.listen(app)

    async def serve(self, request: Request) -> Response:
        if request.method != "POST":
            if request.method == "GET" and request.url.path == "/.well-known/agent-card.json":
                return JSONResponse(self.card)
            return PlainTextResponse("Not found", status_code=404)
        try:
            body = await request.json()
        except ValueError:
            return rpc_error(400, -32700, "Parse error")
        self.received.append(Received(request.url.path, body))
        request_id = body.get("id") if isinstance(body, dict) else None
        if not isinstance(body, dict) or body.get("method") != "message/send":
            return rpc_error(400, -32601, "Method not found", request_id)
        return self._turn(body["params"]["message"], request_id)

    def _turn(self, incoming: dict[str, Any], request_id: Any) -> Response:
        """An Index server's turn (docs/wire-format.md#index-peers); nothing in it awaits, so turns
        never interleave."""
        task_id = incoming.get("taskId")
        if task_id:
            task = self.tasks.get(task_id)
            if task is None:
                return rpc_error(404, -32001, f'Unknown task "{task_id}"', request_id)
            state = task["status"]["state"]
            if state in TERMINAL_STATES:
                return rpc_error(
                    409,
                    -32002,
                    f'Task "{task_id}" is {state} and cannot accept further messages. '
                    "Start a new task to negotiate again.",
                    request_id,
                )
        else:
            task = {
                "id": str(uuid.uuid4()),
                "contextId": incoming.get("contextId") or str(uuid.uuid4()),
                "status": {"state": "working"},
                "history": [],
                "artifacts": [],
            }
            self.tasks[task["id"]] = task
        task["history"].append(incoming)
        move = self.strategy.decide(view(task, own_role="agent"))
        task["history"].append(
            {
                "messageId": str(uuid.uuid4()),
                "role": "agent",
                "parts": [{"kind": "data", "data": move}],
                "taskId": task["id"],
                "contextId": task["contextId"],
            }
        )
        terminal = move["action"] in TERMINAL_ACTIONS
        state = terminal_state(move["action"]) if terminal else "input-required"
        task["status"] = {"state": state, "timestamp": datetime.now(UTC).isoformat()}
        if terminal:
            task["artifacts"] = [a for a in task["artifacts"] if a["artifactId"] != OUTCOME_ARTIFACT_ID]
            task["artifacts"].append(outcome_artifact(task))
        response = JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": task})
        replies = sum(1 for m in task["history"] if m.get("role") == "agent")
        if self.walk_away_after is not None and replies >= self.walk_away_after and not terminal:
            task["status"] = {"state": "canceled", "timestamp": datetime.now(UTC).isoformat()}
        return response

    def task(self, task_id: str) -> dict[str, Any]:
        """The peer's own stored Task."""
        return self.tasks[task_id]


def outcome_artifact(task: dict[str, Any]) -> dict[str, Any]:
    """The ``negotiation-outcome`` artifact of a closed task: ``{state, status, basis, terms?, reason?}``."""
    verdict = verify_agreement(task_record_from_json(task))
    data: dict[str, Any] = {
        "state": task["status"]["state"],
        "status": verdict.status,
        "basis": verdict.basis,
        "reason": verdict.reason,
    }
    if verdict.terms is not None:
        data["terms"] = verdict.terms
    return {
        "artifactId": OUTCOME_ARTIFACT_ID,
        "name": "negotiation-outcome",
        "parts": [{"kind": "data", "data": data}],
    }


class IndexClientError(Exception):
    """A send failed: ``status`` is the HTTP status, ``error`` the JSON-RPC error object, if any."""

    def __init__(self, message: str, *, status: int, error: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = error


@dataclass
class Turn:
    """One send's result: the Task back, its state, and their reply read from ``history[-1]``."""

    task: dict[str, Any]
    outcome: str
    decision: dict[str, Any] | None


@dataclass
class IndexClient:
    """An Index-style client (``A2ANegotiationClient``); see the module docstring."""

    strategy: Strategy = field(default_factory=ScriptedBuyer)
    timeout: float = SEND_TIMEOUT
    sent: list[dict[str, Any]] = field(default_factory=list)

    def send(self, url: str, data: dict[str, Any], task: dict[str, Any] | None = None) -> dict[str, Any]:
        """POST ``data`` as one ``message/send`` to ``url``; returns the Task of the result.

        Raises :class:`IndexClientError`: "A2A message/send to <url> failed (<status>): <body>"
        on a non-2xx reply, "A2A message/send to <url> returned an error: <message>" on a
        JSON-RPC error in a 2xx one.
        """
        message: dict[str, Any] = {
            "messageId": str(uuid.uuid4()),
            "role": "user",
            "parts": [{"kind": "data", "data": data}],
        }
        if task is not None:
            message |= {"taskId": task["id"], "contextId": task["contextId"]}
        body = {
            "jsonrpc": "2.0",
            "id": str(uuid.uuid4()),
            "method": "message/send",
            "params": {"message": message},
        }
        self.sent.append(body)
        response = httpx.post(url, json=body, timeout=self.timeout)
        if not response.is_success:
            raise IndexClientError(
                f"A2A message/send to {url} failed ({response.status_code}): {response.text}",
                status=response.status_code,
                error=rpc_error_of(response),
            )
        reply = response.json()
        if error := reply.get("error"):
            raise IndexClientError(
                f"A2A message/send to {url} returned an error: {error.get('message')}",
                status=response.status_code,
                error=error,
            )
        return dict(reply["result"])

    def initiate(self, url: str) -> Turn:
        """Open a task: decide on an empty history, send with no ids."""
        return self._turn(url, self.strategy.decide([]), None)

    def continue_(self, url: str, task: dict[str, Any]) -> Turn:
        """Send our next move on ``task``. Raises ValueError, spending no decision, if it is finished."""
        state = task["status"]["state"]
        if state in TERMINAL_STATES:
            raise ValueError(f'Task "{task["id"]}" is already {state}.')
        return self._turn(url, self.strategy.decide(view(task, own_role="user")), task)

    def negotiate(self, url: str, *, max_turns: int = 10) -> Turn:
        """Initiate, then continue until the task is finished or we have sent ``max_turns`` moves."""
        turn = self.initiate(url)
        while turn.outcome not in TERMINAL_STATES and turns_of(turn.task) < max_turns:
            turn = self.continue_(url, turn.task)
        return turn

    def _turn(self, url: str, data: dict[str, Any], task: dict[str, Any] | None) -> Turn:
        returned = self.send(url, data, task)
        return Turn(returned, returned["status"]["state"], read_move(returned["history"][-1]))


def rpc_error_of(response: httpx.Response) -> dict[str, Any] | None:
    """The JSON-RPC error object in ``response``'s body, if its body is one."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None
    return error if isinstance(error, dict) else None


def turns_of(task: dict[str, Any]) -> int:
    """The client's turns on ``task``: its ``role:"user"`` messages (docs/wire-format.md#index-peers)."""
    return sum(1 for m in task["history"] if m.get("role") == "user")
