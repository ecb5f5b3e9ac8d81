"""The digest a ``negotiate`` or ``answer`` call returns: one text for a batch of events.

The format is the seed's, exactly (docs/design.md#the-digest),
so a model trained on either reads the same thing. An event is a dict with
``kind`` (settled | asking | budget | failed | skipped | recorded), ``id`` and
optional ``peer`` and ``url``, plus per kind: ``settlement`` {outcome, terms,
reason} or ``state``; ``question`` and ``last``; ``turns`` and ``last``;
``error``; ``reason``. ``last`` is their last move {message, terms}.
"""

from __future__ import annotations

import json
import re
from typing import Any

Event = dict[str, Any]

_GROUPS = (
    ("settled", "Settled"),
    ("asking", "Waiting on you"),
    ("budget", "Out of turns"),
    ("failed", "Failed"),
    ("skipped", "Skipped"),
    ("recorded", "Recorded"),
)
_UNANSWERED_HINT = (
    " — the exchange is still open; answer this id with how to respond to their last move, "
    "do not open a new one"
)
_WAITING_HINT = " — ask your party once with ask_user, then call answer with every id the answer applies to"


def compact_json(value: Any) -> str:
    """JSON as JavaScript's ``JSON.stringify`` writes it (no spaces)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")
TEXT_LIMIT = 300


def clean(text: object) -> str:
    """Counterparty text made safe for one digest line: control characters and line breaks
    become spaces (a peer must not forge a heading or a line of its own), and it is cut to
    ``TEXT_LIMIT`` characters."""
    flat = _CONTROL.sub(" ", str(text)).strip()
    return flat if len(flat) <= TEXT_LIMIT else flat[: TEXT_LIMIT - 1] + "…"


def render(events: list[Event]) -> str:
    """The digest text for ``events``; ``"No negotiations."`` for none."""
    if not events:
        return "No negotiations."
    blocks = []
    for kind, heading in _GROUPS:
        group = [e for e in events if e["kind"] == kind]
        if not group:
            continue
        hint = _WAITING_HINT if kind == "asking" else ""
        lines = [f"{heading} ({len(group)}){hint}:"] + [_line(e) for e in group]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def _line(e: Event) -> str:
    head = f"- {clean(e['id'])}"
    if e.get("peer"):
        head += f" with {clean(e['peer'])}"
    if e.get("url"):
        head += f" ({clean(e['url'])})"
    kind = e["kind"]
    if kind == "settled":
        s = e.get("settlement")
        if not s:
            return f"{head} — ended ({e.get('state', '')})"
        detail = clean(compact_json(s["terms"]) if s.get("terms") else s.get("reason", ""))
        line = f"{head} — {s['outcome']}" + (f": {detail}" if detail else "")
        if s["outcome"] == "unanswered":
            line += _UNANSWERED_HINT
        return line
    if kind == "asking":
        return f'{head} — asks: "{clean(e["question"])}"{_last_move(e)}'
    if kind == "budget":
        return f"{head} — {e['turns']} turns, still open{_last_move(e)}"
    if kind == "failed":
        return f"{head} — {clean(e['error'])}"
    return f"{head} — {clean(e.get('reason', ''))}"


def _last_move(e: Event) -> str:
    last = e.get("last")
    if not last:
        return ""
    terms = f" {clean(compact_json(last['terms']))}" if last.get("terms") else ""
    return f' (their last move: "{clean(last["message"])}"{terms})'
