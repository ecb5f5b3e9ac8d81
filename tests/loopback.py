"""Test servers on loopback: an ASGI app served by uvicorn in a daemon thread of the test process.

:class:`LoopbackServer` owns the port, the uvicorn server and the lifecycle (a context manager:
``__enter__`` starts it and waits until it listens, ``__exit__`` asks it to stop).
:func:`minimal_card` is the smallest A2A 1.0 AgentCard a peer serves: one JSON-RPC 1.0
interface, no streaming, JSON in and out, one ``negotiate`` skill.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Self

import uvicorn
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.types import ASGIApp

from tests.conftest import free_port, wait_until


class LoopbackServer:
    """Call ``super().__init__()`` first (it picks ``port`` and ``origin``), then ``listen(app)``.

    ``what`` names the server in the timeout message; override ``_run`` to serve other than by
    ``uvicorn.Server.run`` (it is the thread's target).
    """

    what = "the loopback server"

    def __init__(self) -> None:
        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"

    def listen(self, app: ASGIApp) -> None:
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )

    def _run(self) -> None:
        self.server.run()

    def __enter__(self) -> Self:
        threading.Thread(target=self._run, daemon=True).start()
        wait_until(lambda: self.server.started, what=self.what)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True


def agent_card(name: str, description: str, url: str, *, skill_description: str = "Sells.") -> AgentCard:
    """A minimal A2A 1.0 card with its one interface at ``url``."""
    return AgentCard(
        name=name,
        description=description,
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
        skills=[
            AgentSkill(id="negotiate", name="Negotiate", description=skill_description, tags=["negotiation"])
        ],
    )


def minimal_card(name: str, description: str, url: str) -> dict[str, Any]:
    """:func:`agent_card` as JSON, as served at ``<peer>/.well-known/agent-card.json``."""
    return agent_card_to_dict(agent_card(name, description, url))


def wire_message(role: str, move: dict[str, Any], task_id: str, context_id: str) -> dict[str, Any]:
    """An A2A 1.0 JSON Message carrying one move, as a hand-written peer puts it in a Task."""
    return {
        "messageId": str(uuid.uuid4()),
        "role": role,
        "taskId": task_id,
        "contextId": context_id,
        "parts": [{"data": move}],
    }
