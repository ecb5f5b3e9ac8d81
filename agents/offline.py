"""The ``offline`` model's loop policy: deterministic, no key, no network.

It is what ``make demo`` and most tests run, and it is named ``offline``
wherever it appears. The policy, read off the last message:

* a task from the party that names counterparties by URL → ``negotiate`` with
  every one of them, the task as the objective;
* a digest with a "Waiting on you" group → ``ask_user`` once, with every
  question in it;
* the party's answer to that → ``answer`` every waiting id with it;
* any other digest → finish, reporting the digest;
* anything else → finish, saying what the offline model cannot do.
"""

from __future__ import annotations

import json
import re

from agents.llm import ChatMessage, ModelReply, ToolCall, ToolSpec

_URL = re.compile(r"https?://[^\s,;]+[^\s,;.)]")
_WAITING_HEADING = re.compile(r"^Waiting on you \(\d+\)")
_WAITING_LINE = re.compile(r'^- (?P<id>\S+).*? — asks: "(?P<question>.*?)"')


class OfflineModel:
    """The deterministic loop policy described in the module docstring."""

    name = "offline"

    def complete(self, *, messages: list[ChatMessage], tools: list[ToolSpec]) -> ModelReply:
        available = {t.name for t in tools}
        last = messages[-1]
        if last["role"] == "user":
            urls = _URL.findall(last["content"] or "")
            if urls and "negotiate" in available:
                targets = [{"url": u, "objective": last["content"]} for u in dict.fromkeys(urls)]
                return self._call(messages, "negotiate", {"targets": targets})
            return self._say(
                "The offline model acts only on tasks that name the counterparties to negotiate "
                "with by URL, and this task names none."
            )
        if last["role"] == "tool":
            name = _tool_name(messages, last["tool_call_id"])
            if name == "ask_user":
                waiting = _waiting(_last_digest(messages))
                if waiting and "answer" in available:
                    ids = [i for i, _ in waiting]
                    return self._call(messages, "answer", {"ids": ids, "guidance": last["content"]})
                return self._say(f"Noted: {last['content']}")
            waiting = _waiting(last["content"] or "")
            if waiting and "ask_user" in available:
                questions = list(dict.fromkeys(q for _, q in waiting))
                return self._call(messages, "ask_user", {"question": " ".join(questions)})
            return self._say(f"Here is where things stand.\n{last['content']}")
        return self._say("There is nothing for the offline model to do.")

    def _call(self, messages: list[ChatMessage], name: str, arguments: dict[str, object]) -> ModelReply:
        call = ToolCall(id=f"offline-{len(messages)}", name=name, arguments=json.dumps(arguments))
        return ModelReply(content="", tool_calls=(call,), model=self.name)

    def _say(self, text: str) -> ModelReply:
        return ModelReply(content=text, model=self.name)


def _tool_name(messages: list[ChatMessage], tool_call_id: str) -> str:
    for message in reversed(messages):
        for call in message.get("tool_calls") or []:
            if call["id"] == tool_call_id:
                return str(call["function"]["name"])
    return ""


def _last_digest(messages: list[ChatMessage]) -> str:
    for message in reversed(messages):
        if message["role"] == "tool" and _tool_name(messages, message["tool_call_id"]) in (
            "negotiate",
            "answer",
        ):
            return str(message["content"] or "")
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
