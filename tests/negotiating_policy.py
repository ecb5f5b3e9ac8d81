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
offer, and on its last move offers its limit.

    with ChatServer(responder=NegotiatingPolicy()) as server: ...
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.chat_server import Reply, text, tool_calls

MOVE_TOOL = "decide_move"
_LIMIT = re.compile(r"amount: at (most|least) \D{0,3}?([\d,]+(?:\.\d+)?)")
_GUIDANCE = re.compile(r"(up to|at most|at least|minimum)\D{0,12}?([\d,]+)", re.I)
_MOVES_LEFT = re.compile(r"You have (\d+) moves? left")
_OFFER = re.compile(r"^\d+\. They — (\w+): .*\[offer ([^:\]]+): (\{.*\})\]", re.M)


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
        opening_move = "propose" if not offers and "propose" in actions else "counter"
        return {
            "action": opening_move if opening_move in actions else actions[0],
            "message": f"I can do {mine:.0f} {self.currency} a day.",
            "terms": {"amount": mine, "currency": self.currency},
        }
