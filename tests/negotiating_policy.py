"""A small deterministic negotiating policy that answers chat-completions requests, for tests.

It plays the model behind a Parley agent on a chat model: it reads only what
the platform sends — the decision prompt (the party's hard limits, the moves
left, the record with its ``[offer <id>: <terms>]`` lines) and the offered
``decide_move`` tool's schema (the action enum) — and answers one tool call.
So a test that passes shows the prompt carries what a model needs.

The policy: with no limit (no hard limit in the prompt, no guidance naming a
number) it asks, when ``ask`` is offered. Otherwise it concedes linearly from
an opening (70% of a ceiling, 140% of a floor) to its limit over the moves it
has, accepts the counterparty's last offer once it is as good as its own next
offer, and on its last move offers its limit — or, when it has their offer and
still cannot accept it, rejects. A reject is answered with a reject.

    with ChatServer(responder=NegotiatingPolicy()) as server: ...

:class:`AgentLoopPolicy` plays the agent loop of the same agent and hands each
decision (a request that offers ``decide_move``) to its ``NegotiatingPolicy``,
so one server answers both models an agent on a chat model has:

    with ChatServer(responder=AgentLoopPolicy()) as server: ...
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.chat_server import Reply, text, tool_calls

MOVE_TOOL = "decide_move"
_LIMIT = re.compile(r"amount: at (most|least) \D{0,3}?([\d,]+(?:\.\d+)?)")
_GUIDANCE = re.compile(r"(up to|at most|at least|minimum)\D{0,12}?([\d,]+)", re.I)
_MOVES_LEFT = re.compile(r"You have (\d+) moves? left")
_LINE = re.compile(r"^\d+\. (You|They) — (\w+):", re.M)
_OFFER = re.compile(r"^\d+\. They — (\w+): .*\[offer ([^:\]]+): (\{.*\})\]", re.M)
_URL = re.compile(r"https?://[^\s,;]+[^\s,;.)]")
# A digest's group headings and the lines of its "Waiting on you" group (docs/design.md#the-digest).
_HEADING = re.compile(r"^\w[\w ]* \(\d+\)")
_WAITING = re.compile(r'^- (?P<id>\S+).*? — asks: "(?P<question>.*?)"(?= \(their last move: |$)')
DIGEST_TOOLS = ("negotiate", "answer")
ASK_FOR_TARGETS = "Which agents should I negotiate with? Give me their A2A URLs."


@dataclass
class NegotiatingPolicy:
    """The responder: ``currency`` goes next to every amount; ``calls`` counts decisions answered."""

    currency: str = "EUR"
    calls: int = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        tool = next((t for t in body.get("tools") or [] if t["function"]["name"] == MOVE_TOOL), None)
        if tool is None:
            return text("I only negotiate.")
        self.calls += 1
        system = body["messages"][0]["content"]
        record = body["messages"][1]["content"]
        actions = tool["function"]["parameters"]["properties"]["action"]["enum"]
        return tool_calls((f"call_{self.calls}", MOVE_TOOL, json.dumps(self.decide(system, record, actions))))

    def decide(self, system: str, record: str, actions: list[str]) -> dict[str, Any]:
        """The move's arguments for the prompt ``system`` and ``record`` with these ``actions``."""
        limit = _LIMIT.search(system) or _GUIDANCE.search(system)
        if limit is None:
            if "ask" in actions:
                return {"action": "ask", "message": "What is the most (or least) I may agree to per day?"}
            return {"action": actions[-1], "message": "I cannot go on without my limit."}
        moves = _LINE.findall(record)
        if moves and moves[-1] == ("They", "reject") and "reject" in actions:
            return {"action": "reject", "message": "Understood. Thank you for your time."}
        ceiling = limit.group(1).lower() in ("most", "up to", "at most")
        value = float(limit.group(2).replace(",", ""))
        left = int(m.group(1)) if (m := _MOVES_LEFT.search(system)) else 1
        opening = value * (0.7 if ceiling else 1.4)
        ours = len(re.findall(r"^\d+\. You — ", record, re.M))
        total = ours + left
        mine = value if left <= 1 else opening + (value - opening) * ours / max(total - 1, 1)
        mine = float(round(mine))
        offers = _OFFER.findall(record)
        if offers:
            _action, offer_id, terms_json = offers[-1]
            terms = json.loads(terms_json)
            amount = terms.get("amount")
            good = isinstance(amount, int | float) and (amount <= mine if ceiling else amount >= mine)
            if good and "accept" in actions:
                return {
                    "action": "accept",
                    "message": f"Agreed at {amount}.",
                    "terms": terms,
                    "acceptsOfferId": offer_id,
                }
            if left <= 1 and "reject" in actions:
                return {"action": "reject", "message": "We cannot agree on these terms, so I must decline."}
        opening_move = "propose" if not offers and "propose" in actions else "counter"
        return {
            "action": opening_move if opening_move in actions else actions[0],
            "message": f"I can do {mine:.0f} {self.currency} a day.",
            "terms": {"amount": mine, "currency": self.currency},
        }


@dataclass
class AgentLoopPolicy:
    """The responder for an agent on a chat model: it plays the agent loop, and answers every
    request that offers ``decide_move`` with ``negotiating`` (a negotiation turn's decision).

    The loop, read off the conversation and the tools offered (``negotiate``, ``answer``,
    ``ask_user``):

    * the party's task names A2A URLs → ``negotiate`` with each, the task as the objective;
      it names none → ``ask_user`` for them;
    * a digest whose "Waiting on you" group lists negotiations → ``ask_user`` once, every
      question in it;
    * the party's answer to that → ``answer`` with every waiting id and the answer as guidance;
      an answer naming URLs → ``negotiate`` with them;
    * any other tool result → finish with text that reports it (``finished`` counts these).

    ``decisions`` counts the decisions asked for; ``instead`` answers the n-th of them (from 1)
    with its reply rather than ``negotiating``'s: a test's way to make the model misbehave, or
    move as the test needs, on chosen turns.
    """

    negotiating: NegotiatingPolicy = field(default_factory=NegotiatingPolicy)
    instead: dict[int, Reply] = field(default_factory=dict)
    decisions: int = 0
    finished: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self, body: dict[str, Any]) -> Reply:
        offered = {t["function"]["name"] for t in body.get("tools") or []}
        if asks_for_a_move(body):
            with self._lock:
                self.decisions += 1
                scripted = self.instead.get(self.decisions)
            return scripted or self.negotiating(body)
        return self.step(body["messages"], offered)

    def step(self, messages: list[dict[str, Any]], offered: set[str]) -> Reply:
        """The loop's answer to ``messages`` with the tools ``offered``."""
        last = messages[-1]
        content = str(last.get("content") or "")
        if last["role"] == "user":
            if _URL.search(content) and "negotiate" in offered:
                return self._negotiate(messages, content, objective=content)
            if "ask_user" in offered:
                return _call(messages, "ask_user", {"question": ASK_FOR_TARGETS})
            return self._say("I can only negotiate with agents named by their A2A URL.")
        if last["role"] != "tool":
            return self._say("There is nothing left to do.")
        name = _called(messages, last["tool_call_id"])
        if name == "ask_user":
            waiting = waiting_in(_last_digest(messages))
            if waiting and "answer" in offered:
                return _call(messages, "answer", {"ids": [i for i, _ in waiting], "guidance": content})
            if _URL.search(content) and "negotiate" in offered:
                return self._negotiate(messages, content, objective=_task(messages))
            return self._say(f"Noted: {content}")
        waiting = waiting_in(content) if name in DIGEST_TOOLS else []
        if waiting and "ask_user" in offered:
            return _call(messages, "ask_user", {"question": " ".join(dict.fromkeys(q for _, q in waiting))})
        return self._say(f"Here is where things stand.\n{content}")

    def _negotiate(self, messages: list[dict[str, Any]], found_in: str, *, objective: str) -> Reply:
        targets = [{"url": url, "objective": objective} for url in dict.fromkeys(_URL.findall(found_in))]
        return _call(messages, "negotiate", {"targets": targets})

    def _say(self, content: str) -> Reply:
        self.finished += 1
        return text(content)


def asks_for_a_move(body: dict[str, Any]) -> bool:
    """Whether the chat-completions request ``body`` asks for a negotiation move (offers ``decide_move``)."""
    return any(t["function"]["name"] == MOVE_TOOL for t in body.get("tools") or [])


def waiting_in(digest: str) -> list[tuple[str, str]]:
    """(negotiation id, question) for each line of ``digest``'s "Waiting on you" group."""
    found: list[tuple[str, str]] = []
    in_group = False
    for line in digest.splitlines():
        if _HEADING.match(line):
            in_group = line.startswith("Waiting on you (")
        elif in_group and (match := _WAITING.match(line)):
            found.append((match["id"], match["question"]))
    return found


def _call(messages: list[dict[str, Any]], name: str, arguments: dict[str, Any]) -> Reply:
    # The conversation only grows, so its length makes the id unique in the thread.
    return tool_calls((f"loop_{len(messages)}", name, json.dumps(arguments)))


def _called(messages: list[dict[str, Any]], tool_call_id: str) -> str:
    """The name of the tool the call ``tool_call_id`` of an assistant message called."""
    for message in reversed(messages):
        for call in message.get("tool_calls") or []:
            if call["id"] == tool_call_id:
                return str(call["function"]["name"])
    return ""


def _last_digest(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message["role"] == "tool" and _called(messages, message["tool_call_id"]) in DIGEST_TOOLS:
            return str(message.get("content") or "")
    return ""


def _task(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content") or "") for m in reversed(messages) if m["role"] == "user"), "")
