"""The window history policy: the last N exchanges, a tool call never split from its results."""

from __future__ import annotations

from typing import Any

import pytest

from agents.history import window
from agents.llm import ChatMessage


def user(content: str) -> ChatMessage:
    return {"role": "user", "content": content}


def assistant(content: str = "", *calls: str) -> ChatMessage:
    message: ChatMessage = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": call, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
            for call in calls
        ]
    return message


def tool(call: str) -> ChatMessage:
    return {"role": "tool", "content": f"result of {call}", "tool_call_id": call}


def _labels(messages: list[ChatMessage]) -> list[str]:
    """Each message as role and content (assistant) or call id (tool), for readable assertions."""
    out = []
    for m in messages:
        label = m.get("tool_call_id") or m["content"] or ",".join(c["id"] for c in m["tool_calls"])
        out.append(f"{m['role']}:{label}")
    return out


THREAD = [
    user("find a CFO"),
    assistant("", "c1"),
    tool("c1"),
    assistant("found two"),
    user("ask both"),
    assistant("", "c2", "c3", "c4"),
    tool("c2"),
    tool("c3"),
    tool("c4"),
    assistant("both asked"),
]


@pytest.mark.parametrize(
    ("exchanges", "expected"),
    [
        (1, ["assistant:both asked"]),
        (2, ["assistant:c2,c3,c4", "tool:c2", "tool:c3", "tool:c4", "assistant:both asked"]),
        (
            3,
            ["user:ask both", "assistant:c2,c3,c4", "tool:c2", "tool:c3", "tool:c4", "assistant:both asked"],
        ),
        (
            5,
            [
                "assistant:c1",
                "tool:c1",
                "assistant:found two",
                "user:ask both",
                "assistant:c2,c3,c4",
                "tool:c2",
                "tool:c3",
                "tool:c4",
                "assistant:both asked",
            ],
        ),
    ],
)
def test_window_keeps_the_last_exchanges(exchanges: int, expected: list[str]) -> None:
    assert _labels(window(THREAD, exchanges)) == expected


@pytest.mark.parametrize("exchanges", [6, 7, 100])
def test_a_history_no_longer_than_the_window_comes_back_whole(exchanges: int) -> None:
    result = window(THREAD, exchanges)

    assert result == THREAD
    assert result is not THREAD


def test_an_empty_history() -> None:
    assert window([], 3) == []


def test_a_cut_before_a_user_message() -> None:
    messages = [user("one"), assistant("two"), user("three"), assistant("four")]

    assert _labels(window(messages, 2)) == ["user:three", "assistant:four"]
    assert _labels(window(messages, 1)) == ["assistant:four"]


def test_three_parallel_tool_results_stay_with_their_call() -> None:
    messages = [user("go"), assistant("", "a", "b", "c"), tool("a"), tool("b"), tool("c")]

    assert _labels(window(messages, 1)) == ["assistant:a,b,c", "tool:a", "tool:b", "tool:c"]


def test_window_of_one_ending_on_a_user_message() -> None:
    assert _labels(window([*THREAD, user("thanks")], 1)) == ["user:thanks"]


def test_a_history_of_only_tool_exchanges() -> None:
    messages = [
        assistant("", "a"),
        tool("a"),
        assistant("", "b", "c"),
        tool("b"),
        tool("c"),
        assistant("", "d"),
        tool("d"),
    ]

    assert _labels(window(messages, 2)) == ["assistant:b,c", "tool:b", "tool:c", "assistant:d", "tool:d"]
    assert _labels(window(messages, 1)) == ["assistant:d", "tool:d"]


def test_a_late_result_moves_the_cut_back_to_its_call() -> None:
    # "a" was answered after the party's next message (a deferred call): a window
    # of 2 would start at "user:more" but then hold a result whose call it cut away.
    messages = [user("first"), assistant("", "a", "b"), tool("b"), user("more"), tool("a"), assistant("done")]

    assert _labels(window(messages, 2)) == _labels(messages[1:])
    assert _labels(window(messages, 1)) == ["assistant:done"]


def test_a_moved_cut_takes_in_the_calls_its_new_results_answer() -> None:
    messages = [
        user("start"),
        assistant("", "a"),
        assistant("", "b"),
        tool("a"),
        user("next"),
        tool("b"),
        assistant("done"),
    ]

    # A window of 2 starts at "user:next"; "b" pulls it back to its call, which takes in "a" and its call.
    assert _labels(window(messages, 2)) == _labels(messages[1:])


def test_leading_orphan_tool_messages_are_cut_like_any_other() -> None:
    messages = [tool("lost"), user("hello"), assistant("hi")]

    assert _labels(window(messages, 1)) == ["assistant:hi"]
    assert _labels(window(messages, 2)) == _labels(messages)


def test_the_message_dicts_are_shared_not_copied() -> None:
    result = window(THREAD, 1)

    assert result[0] is THREAD[-1]


@pytest.mark.parametrize("exchanges", [0, -1])
def test_a_window_holds_at_least_one_exchange(exchanges: int) -> None:
    with pytest.raises(ValueError, match="at least 1 exchange"):
        window(THREAD, exchanges)


@pytest.mark.parametrize(
    "stray",
    [{"role": "system", "content": "you are"}, {"content": "no role"}],
)
def test_a_message_of_another_role_is_refused(stray: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="message 1 has role"):
        window([user("hi"), stray, assistant("hello")], 1)
