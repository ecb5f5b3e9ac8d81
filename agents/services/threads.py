"""The run's thread: messages appended under the run's lock, read back in chat-completions form.

A thread is an intent's messages in ``seq`` order; every run of the intent writes to it, one
at a time (a pending run waits for the active one, see :mod:`agents.services.runs`).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Max

from agents.llm import ChatMessage
from agents.models import Message, Run


def pending_calls(run: Run) -> dict[str, dict[str, str]]:
    """Tool calls of the run's last assistant message that have no result yet, by id."""
    last = run.messages.filter(role=Message.Role.ASSISTANT).order_by("-seq").first()
    if last is None or not last.tool_calls:
        return {}
    answered = set(
        run.messages.filter(role=Message.Role.TOOL, seq__gt=last.seq).values_list("tool_call_id", flat=True)
    )
    return {c["id"]: c for c in last.tool_calls if c["id"] not in answered}


class Thread:
    """A thread as the task stepping its run reads it once and extends it: the intent's messages in
    ``seq`` order, then those the task's steps append (:meth:`append`), so a step after the first
    reads no history and asks Postgres for no ``seq``.

    Valid while the run is stepping: no one else appends to the thread then (a result that comes
    later, an answer, is recorded only once the run waits; the thread's next run starts only once
    this one ended), and a step appends only under the run's row lock once its ``step_count`` is
    checked, so a copy read before another worker's step belongs to a step that is refused. A
    ``seq`` taken all the same fails on ``message_seq_per_thread`` rather than reorder the thread.

    What a step appends is written by :meth:`save`, in one INSERT, in the step's transaction: a
    step writes its reply and its tools' results together, and nothing a step's tools do reads
    the thread back from the database. A transaction that rolls back after :meth:`append` leaves
    the copy wrong: drop it then.
    """

    def __init__(self, run: Run) -> None:
        self.messages = list(
            Message.objects.for_tenant(run.tenant_id).filter(intent_id=run.intent_id).order_by("seq")
        )
        self._unsaved: list[Message] = []

    def chat(self) -> list[ChatMessage]:
        """The thread's messages in chat-completions form, tool results in the order of their calls.

        Results of one model message arrive in any order (a deferred call ends
        after a quick one); the model sees them in the order it made the calls.
        """
        chat: list[ChatMessage] = []
        order: dict[str, int] = {}
        results: list[ChatMessage] = []
        for m in self.messages:
            if m.role == Message.Role.TOOL:
                results.append({"role": "tool", "content": m.content, "tool_call_id": m.tool_call_id})
                continue
            chat.extend(sorted(results, key=lambda r: order.get(r["tool_call_id"], len(order))))
            results = []
            entry: ChatMessage = {"role": m.role, "content": m.content}
            if m.tool_calls:
                order = {c["id"]: i for i, c in enumerate(m.tool_calls)}
                entry["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in m.tool_calls
                ]
            chat.append(entry)
        chat.extend(sorted(results, key=lambda r: order.get(r["tool_call_id"], len(order))))
        return chat

    def call_ids(self, run: Run) -> set[str]:
        """The ids of the tool calls ``run``'s model replies made."""
        return {
            call["id"]
            for m in self.messages
            if m.run_id == run.pk and m.role == Message.Role.ASSISTANT
            for call in m.tool_calls
        }

    def append(self, run: Run, **fields: Any) -> Message:
        """Append to the thread as :func:`append` does, with the ``seq`` after this copy's last; the
        message is written by :meth:`save`."""
        message = Message(**_fields(run, seq=(self.messages[-1].seq if self.messages else 0) + 1, **fields))
        self.messages.append(message)
        self._unsaved.append(message)
        return message

    def append_result(self, run: Run, call_id: str, name: str, text: str) -> None:
        """Append the result of tool call ``call_id`` as :func:`append_result` does (see :meth:`save`)."""
        self.append(
            run, role=Message.Role.TOOL, content=text, tool_call_id=call_id, name=name, step=run.step_count
        )

    def save(self) -> None:
        """Write the messages appended since the last save, in one INSERT; call it in the
        transaction that holds the run's row lock. Raises ``IntegrityError`` for a ``seq`` another
        writer took (see the class)."""
        Message.objects.bulk_create(self._unsaved)
        self._unsaved = []


def append(run: Run, **fields: Any) -> Message:
    """Append to the thread; callers hold the run's row lock, so ``seq`` cannot collide.

    ``fields``: ``role``, ``content`` and ``step`` (the run step that wrote it), and as they apply
    ``tool_calls``, ``tool_call_id``, ``name`` and the step's usage.
    """
    last = (
        Message.objects.for_tenant(run.tenant_id).filter(intent_id=run.intent_id).aggregate(m=Max("seq"))["m"]
        or 0
    )
    return Message.objects.create(**_fields(run, seq=last + 1, **fields))


def append_result(run: Run, call_id: str, name: str, text: str) -> None:
    append(run, role=Message.Role.TOOL, content=text, tool_call_id=call_id, name=name, step=run.step_count)


def _fields(
    run: Run,
    *,
    seq: int,
    role: str,
    content: str,
    step: int,
    tool_calls: list[dict[str, str]] | None = None,
    tool_call_id: str = "",
    name: str = "",
    **usage: Any,
) -> dict[str, Any]:
    """A message's fields: ``run``'s tenant, intent and run, and those given."""
    return dict(
        tenant_id=run.tenant_id,
        intent_id=run.intent_id,
        run=run,
        seq=seq,
        step=step,
        role=role,
        content=content,
        tool_calls=tool_calls or [],
        tool_call_id=tool_call_id,
        name=name,
        **usage,
    )
