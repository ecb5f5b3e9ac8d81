"""Test servers on loopback: an ASGI app served by uvicorn in a daemon thread of the test process.

:class:`LoopbackServer` owns the port, the uvicorn server and the lifecycle (a context manager:
``__enter__`` starts it and waits until it listens, ``__exit__`` asks it to stop).
:class:`PageServer` answers fixed pages over HTTP; :class:`NameServer` answers DNS TXT queries over
UDP, as a zone's name server does; :class:`SilentServer` takes connections and never answers.
:func:`minimal_card` is the smallest A2A 1.0 AgentCard a peer serves: one JSON-RPC 1.0
interface, no streaming, JSON in and out, one ``negotiate`` skill.
"""

from __future__ import annotations

import socket
import threading
import uuid
from typing import Any, Self

import dns.message
import dns.rcode
import dns.rrset
import uvicorn
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

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


class PageServer(LoopbackServer):
    """An HTTP server on loopback answering each path of :attr:`pages` with its response, any other
    with 404."""

    what = "the page server"

    def __init__(self) -> None:
        super().__init__()
        self.pages: dict[str, Response] = {}

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                page = self.pages.get(scope["path"], PlainTextResponse("Not found.", status_code=404))
                await page(scope, receive, send)

        self.listen(app)


class NameServer:
    """A DNS name server on loopback UDP (a context manager): a TXT query for a name of
    :attr:`records` is answered with its records, each in zone-file text (``'"a" "b"'``: one record
    of two strings); an empty list is a name without TXT records; any other name does not exist
    (NXDOMAIN). :attr:`silent` drops every query unanswered. ``address`` is ``127.0.0.1:<port>``."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.socket.getsockname()[1]}"
        self.records: dict[str, list[str]] = {}
        self.silent = False

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.socket.recvfrom(4096)
            except OSError:
                return  # closed
            if self.silent:
                continue
            query = dns.message.from_wire(data)
            response = dns.message.make_response(query)
            [question] = query.question
            texts = self.records.get(question.name.to_text(omit_final_dot=True))
            if texts is None:
                response.set_rcode(dns.rcode.NXDOMAIN)
            elif texts:
                response.answer.append(dns.rrset.from_text_list(question.name, 60, "IN", "TXT", texts))
            self.socket.sendto(response.to_wire(), peer)

    def __enter__(self) -> Self:
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.socket.close()


class SilentServer:
    """A TCP port on loopback that takes connections (the kernel's backlog) and never answers."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(8)
        self.port = self.socket.getsockname()[1]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.socket.close()
