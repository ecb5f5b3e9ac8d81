"""Small deterministic policies that answer chat-completions requests, for tests.

They play the models behind Parley agents on a chat model, reading only what
the platform sends, so a test that passes shows the requests carry what a model
needs. :class:`NegotiatingPolicy` decides negotiation moves; :class:`AgentLoopPolicy`
plays the agent loop of a run that negotiates and hands every decision of a
move to a :class:`NegotiatingPolicy`, so one server can stand for every model of
a scenario (both sides of every negotiation, and the run that opened them).

    with ChatServer(responder=NegotiatingPolicy()) as server: ...   # negotiation turns only
    with ChatServer(responder=AgentLoopPolicy()) as server: ...     # runs and turns
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tests.chat_server import Reply, text, tool_calls

MOVE_TOOL = "decide_move"
_LIMIT = re.compile(r"amount: at (most|least) \D{0,3}?([\d,]+(?:\.\d+)?)")
_GUIDANCE = re.compile(r"(up to|at most|at least|minimum)\D{0,12}?([\d,]+)", re.I)
_MOVES_LEFT = re.compile(r"You have (\d+) moves? left")
_OFFER = re.compile(r"^\d+\. They — (\w+): .*\[offer ([^:\]]+): (\{.*\})\]", re.M)
_LINE = re.compile(r"^\d+\. (You|They) — (\w+):", re.M)
_URL = re.compile(r"https?://[^\s,;]+[^\s,;.)]")
_WAITING_HEADING = re.compile(r"^Waiting on you \(\d+\)")
_WAITING_LINE = re.compile(r'^- (?P<id>\S+).*? — asks: "(?P<question>.*?)"')


@dataclass
class NegotiatingPolicy:
    """The responder for negotiation turns: it reads the decision prompt (the party's hard limits,
    the moves left, the record with its ``[offer <id>: <terms>]`` lines) and the offered
    ``decide_move`` tool's schema (the action enum), and answers one tool call.

    The policy: with no limit (no hard limit in the prompt, no guidance naming a
    number) it asks, when ``ask`` is offered. Otherwise it concedes linearly from
    an opening (70% of a ceiling, 140% of a floor) to its limit over the moves it
    has, accepts the counterparty's last offer once it is as good as its own next
    offer, and on its last move offers its limit — or, when it has their offer and
    still cannot accept it, rejects. A reject is answered with a reject.

    ``currency`` goes next to every amount; ``calls`` counts decisions answered.
    """

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
        moves = _LINE.findall(record)
        if moves and moves[-1] == ("They", "reject") and "reject" in actions:
            return {"action": "reject", "message": "Understood. Thank you for your time."}
        limit = _LIMIT.search(system) or _GUIDANCE.search(system)
        if limit is None:
            if "ask" in actions:
                return {"action": "ask", "message": "What is the most (or least) I may agree to per day?"}
            return {"action": actions[-1], "message": "I cannot go on without my limit."}
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
    """The responder for a whole scenario on chat models: the agent loop of a run that negotiates,
    and every negotiation turn (a request offering ``decide_move``), which it hands to
    ``negotiating``.

    For the loop it reads only what a step sends — the messages and the tools
    offered (``negotiate``, ``ask_user``, ``answer``: the loop's defaults) — and
    answers as the ``offline`` loop policy (agents/offline.py) does, by the last
    message:

    * the party's task naming A2A URLs → one ``negotiate`` call, a target per
      URL with the task as its objective;
    * a digest (the result of ``negotiate`` or ``answer``) with a "Waiting on
      you" group → ``ask_user`` once, with each distinct question asked;
    * the party's answer (the result of ``ask_user``) → ``answer`` with every id
      waiting in the last digest, the answer as guidance;
    * any other digest → the final text "Here is where things stand." and the digest;
    * anything else → a final text saying there is nothing to do.

    A tool the step does not offer is never called: it answers text instead.
    ``loop_calls`` counts the loop's requests answered, ``negotiating.calls``
    the decisions.
    """

    negotiating: NegotiatingPolicy = field(default_factory=NegotiatingPolicy)
    loop_calls: int = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        offered = {t["function"]["name"] for t in body.get("tools") or []}
        if MOVE_TOOL in offered:
            return self.negotiating(body)
        self.loop_calls += 1
        messages: list[dict[str, Any]] = body["messages"]
        last = messages[-1]
        content = str(last.get("content") or "")
        if last["role"] == "user" and _URL.search(content):
            targets = [{"url": url, "objective": content} for url in dict.fromkeys(_URL.findall(content))]
            return self._call(messages, offered, "negotiate", {"targets": targets})
        if last["role"] == "tool":
            called = _tool_name(messages, last["tool_call_id"])
            if called == "ask_user":
                ids = [i for i, _ in _waiting(_last_digest(messages))]
                return self._call(messages, offered, "answer", {"ids": ids, "guidance": content})
            if called in ("negotiate", "answer"):
                questions = list(dict.fromkeys(q for _, q in _waiting(content)))
                if questions:
                    return self._call(messages, offered, "ask_user", {"question": " ".join(questions)})
                return text(f"Here is where things stand.\n{content}")
        return text("There is nothing for me to do.")

    def _call(self, messages: list[dict[str, Any]], offered: set[str], name: str, arguments: Any) -> Reply:
        if name not in offered:
            return text(f"I would call {name}, but it is not offered.")
        return tool_calls((f"loop_{len(messages)}", name, json.dumps(arguments)))


def _tool_name(messages: list[dict[str, Any]], tool_call_id: str) -> str:
    """The name of the tool the assistant called as ``tool_call_id``; "" when none did."""
    for message in reversed(messages):
        for call in message.get("tool_calls") or []:
            if call["id"] == tool_call_id:
                return str(call["function"]["name"])
    return ""


def _last_digest(messages: list[dict[str, Any]]) -> str:
    """The latest result of ``negotiate`` or ``answer``; "" before any."""
    for message in reversed(messages):
        if message["role"] == "tool" and _tool_name(messages, message["tool_call_id"]) in (
            "negotiate",
            "answer",
        ):
            return str(message.get("content") or "")
    return ""


def _waiting(digest: str) -> list[tuple[str, str]]:
    """(negotiation id, question) for each line of the digest's "Waiting on you" group."""
    found: list[tuple[str, str]] = []
    in_group = False
    for line in digest.splitlines():
        if not line.startswith("- "):
            in_group = bool(_WAITING_HEADING.match(line))
            continue
        if in_group and (match := _WAITING_LINE.match(line)):
            found.append((match["id"], match["question"]))
    return found
