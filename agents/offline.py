"""The ``offline`` model's loop policy: deterministic, no key, no network.

It is what ``make demo`` and most tests run, and it is named ``offline``
wherever it appears. The policy, read off the last message:

* a task from the party that names counterparties by URL → ``negotiate`` with
  every one of them, the task as the objective;
* a task that names none → ``ask_user`` which agents to negotiate with;
* a digest with a "Waiting on you" group → ``ask_user`` once, with every
  question in it;
* the party's answer to that → ``answer`` every waiting id with it; an answer
  naming URLs instead → ``negotiate`` with them; an ``ask_user`` that failed
  (an agent without a principal has nobody to ask) → finish, saying why;
* any other digest → finish, reporting the digest;
* anything else → finish, saying what the offline model cannot do.
"""

from __future__ import annotations

import json
import re

from agents.llm import CallOptions, ChatMessage, ModelReply, ToolCall, ToolSpec

_URL = re.compile(r"https?://[^\s,;]+[^\s,;.)]")
_WAITING_HEADING = re.compile(r"^Waiting on you \(\d+\)")
ASK_FOR_COUNTERPARTIES = "Which agents should I negotiate with? Give me their A2A URLs."
NO_COUNTERPARTIES = "The offline model acts only on counterparties named by A2A URL, and none was given."
# The question runs to the quote that ends the line or opens "(their last move: …)": a question may
# quote the party's own words.
_WAITING_LINE = re.compile(r'^- (?P<id>\S+).*? — asks: "(?P<question>.*)"(?: \(their last move: .*\))?$')


class OfflineModel:
    """The deterministic loop policy described in the module docstring."""

    def complete(
        self, *, messages: list[ChatMessage], tools: list[ToolSpec], options: CallOptions | None = None
    ) -> ModelReply:
        available = {t.name for t in tools}
        last = messages[-1]
        if last["role"] == "user":
            task = last["content"] or ""
            if _URL.search(task) and "negotiate" in available:
                return self._negotiate(messages, task, objective=task)
            if "ask_user" in available:
                return self._call(messages, "ask_user", {"question": ASK_FOR_COUNTERPARTIES})
            return self._say(NO_COUNTERPARTIES)
        if last["role"] == "tool":
            name = _tool_name(messages, last["tool_call_id"])
            if name == "ask_user":
                answer = last["content"] or ""
                if answer.startswith("Error:"):
                    return self._say(_could_not_ask(answer, _last_digest(messages)))
                waiting = _waiting(_last_digest(messages))
                if waiting and "answer" in available:
                    ids = [i for i, _ in waiting]
                    return self._call(messages, "answer", {"ids": ids, "guidance": answer})
                if _URL.search(answer) and "negotiate" in available:
                    return self._negotiate(messages, answer, objective=_last_task(messages))
                return self._say(NO_COUNTERPARTIES)
            waiting = _waiting(last["content"] or "")
            if waiting and "ask_user" in available:
                questions = list(dict.fromkeys(q for _, q in waiting))
                return self._call(messages, "ask_user", {"question": " ".join(questions)})
            return self._say(f"Here is where things stand.\n{last['content']}")
        return self._say("There is nothing for the offline model to do.")

    def _negotiate(self, messages: list[ChatMessage], text: str, *, objective: str) -> ModelReply:
        targets = [{"url": u, "objective": objective} for u in dict.fromkeys(_URL.findall(text))]
        return self._call(messages, "negotiate", {"targets": targets})

    def _call(self, messages: list[ChatMessage], name: str, arguments: dict[str, object]) -> ModelReply:
        call = ToolCall(id=f"offline-{len(messages)}", name=name, arguments=json.dumps(arguments))
        return ModelReply(content="", tool_calls=(call,), model="offline")

    def _say(self, text: str) -> ModelReply:
        return ModelReply(content=text, model="offline")


def _could_not_ask(error: str, digest: str) -> str:
    """The final answer when ``ask_user`` failed (the agent has no principal, say): why, then where
    things stand, or that nothing names a counterparty."""
    said = f"I could not ask: {error.removeprefix('Error: ')}"
    return f"{said}\nHere is where things stand.\n{digest}" if digest else f"{said}\n{NO_COUNTERPARTIES}"


def _tool_name(messages: list[ChatMessage], tool_call_id: str) -> str:
    for message in reversed(messages):
        for call in message.get("tool_calls") or []:
            if call["id"] == tool_call_id:
                return str(call["function"]["name"])
    return ""


def _last_task(messages: list[ChatMessage]) -> str:
    """The party's last task: the objective of negotiations opened later in the run."""
    for message in reversed(messages):
        if message["role"] == "user":
            return str(message["content"] or "")
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
