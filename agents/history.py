"""How much of a thread a step sends the model: the ``window`` history policy (``Agent.history``)."""

from __future__ import annotations

from agents.llm import ChatMessage


def window(messages: list[ChatMessage], exchanges: int) -> list[ChatMessage]:
    """The thread ``messages`` cut to their last ``exchanges`` exchanges.

    ``messages`` is the thread's history in chat-completions form, oldest
    first, without the system message: roles ``user``, ``assistant`` and
    ``tool``. An exchange is a user message, or an assistant message together
    with the tool messages that answer its calls (matched by ``tool_call_id``
    to the ids in its ``tool_calls``). So a cut falls only before a user or an
    assistant message, never before a tool message, and a model never sees a
    tool result without the call it answers: when a tool message inside the
    window answers an assistant message before the cut (results recorded late,
    after other messages), the cut moves back to that assistant message, and
    the window holds more than ``exchanges`` exchanges.

    A history of at most ``exchanges`` exchanges comes back whole. The result
    is a new list holding the same message dicts. Raises ``ValueError`` when
    ``exchanges`` is below 1 or a message has another role (a system message
    included by mistake would otherwise be cut away silently).
    """
    if exchanges < 1:
        raise ValueError(f"a window holds at least 1 exchange, not {exchanges}")
    starts: list[int] = []
    caller: dict[str, int] = {}
    for index, message in enumerate(messages):
        role = message.get("role")
        if role in ("user", "assistant"):
            starts.append(index)
            for call in message.get("tool_calls") or []:
                caller[call["id"]] = index
        elif role != "tool":
            raise ValueError(f"message {index} has role {role!r}; a thread holds user, assistant and tool")
    if len(starts) <= exchanges:
        return list(messages)
    cut = starts[-exchanges]
    # Walking back from the end, the cut only ever moves earlier, so one pass
    # also catches results that answer calls the moved cut has just taken in.
    index = len(messages) - 1
    while index >= cut:
        message = messages[index]
        if message["role"] == "tool":
            cut = min(cut, caller.get(message.get("tool_call_id", ""), cut))
        index -= 1
    return messages[cut:]
