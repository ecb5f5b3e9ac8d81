"""Recipients on loopback for the requester's side of Agent Exchange, each recording what it received.

:class:`Recipient` is an Agent Exchange recipient written by hand (a bare Starlette app answering
A2A 1.0 JSON-RPC), so it can answer what no honest one would: a card without the extension or
with a preparation elsewhere, a redirect, another media type, extra members, someone else's
reference, a rejected task, a receipt with more in it. :class:`Sink` stands for "elsewhere": any
request it gets is recorded, so a test can show that nothing reached it. :class:`Proxy` puts the
live stack's agent behind another origin and shows it as an A2A 0.3 agent (a card with only its 0.3
interface), so that our client speaks 0.3 to the real gateway.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import AgentExtension
from google.protobuf.struct_pb2 import Struct
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from exchange import wire
from tests.loopback import LoopbackServer, agent_card

PATH = "/agent"


@dataclass
class Received:
    """One request a server got: its method, path, headers (lower-case names) and raw body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Behaviour:
    """How a :class:`Recipient` answers; the defaults are an honest recipient's answers."""

    # The extension's params on the card: None leaves the extension off the card.
    params: dict[str, Any] | None = None
    # The preparation's answer: status, content type, and the body (None: {"reference": <derived>}).
    preparation_status: int = 200
    preparation_type: str = wire.PREPARATION_MEDIA_TYPE
    preparation_body: Any = None
    preparation_headers: dict[str, str] = field(default_factory=dict)
    # The A2A answer: the task's state, its status text, and the receipt (None: an honest one).
    task_state: str = "TASK_STATE_COMPLETED"
    status_text: str = ""
    receipt: dict[str, Any] | None = None
    receipt_media_type: str = wire.RECEIPT_MEDIA_TYPE


class Recipient(LoopbackServer):
    """An Agent Exchange recipient at ``url`` answering as ``behaviour`` says; ``received`` holds
    every request to it, card fetches included."""

    what = "the hand-written recipient"

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        super().__init__()
        self.url = f"{self.origin}{PATH}"
        self.endpoint = f"{self.url}{wire.PREPARATION_PATH}"
        self.behaviour = behaviour or Behaviour()
        self.received: list[Received] = []
        # What the preparation endpoint stored, by reference, as an honest one would.
        self.prepared: dict[str, dict[str, Any]] = {}
        self.listen(
            Starlette(
                routes=[
                    Route(f"{PATH}/.well-known/agent-card.json", self.card, methods=["GET"]),
                    Route(f"{PATH}{wire.PREPARATION_PATH}", self.prepare, methods=["POST"]),
                    Route(PATH, self.rpc, methods=["POST"]),
                ]
            )
        )

    def honest_params(self) -> dict[str, Any]:
        return {
            "preparation": {
                "endpoint": self.endpoint,
                "mediaType": wire.PREPARATION_MEDIA_TYPE,
                "method": "POST",
            }
        }

    # What it was sent.

    def to(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path and r.method == "POST"]

    @property
    def preparations(self) -> list[Received]:
        return self.to(f"{PATH}{wire.PREPARATION_PATH}")

    @property
    def messages(self) -> list[Received]:
        """The A2A calls (JSON-RPC requests) it received."""
        return self.to(PATH)

    # How it answers.

    async def record(self, request: Request) -> Received:
        received = Received(request.method, request.url.path, dict(request.headers), await request.body())
        self.received.append(received)
        return received

    async def card(self, request: Request) -> Response:
        await self.record(request)
        card = agent_card("Hand-written recipient", "Takes Agent Exchange requests.", self.url)
        params = self.behaviour.params
        if params is not None:
            struct = Struct()
            struct.update(params)
            card.capabilities.extensions.append(AgentExtension(uri=wire.EXTENSION_URI, params=struct))
        return JSONResponse(agent_card_to_dict(card))

    async def prepare(self, request: Request) -> Response:
        received = await self.record(request)
        b = self.behaviour
        submitted = received.json()["request"]
        reference = wire.reference_of(submitted)
        body = b.preparation_body
        if body is None:
            self.prepared[reference] = submitted
            body = {"reference": reference}
        # "{reference}" in a crafted answer stands for the reference of what was sent.
        content = (
            body if isinstance(body, bytes) else json.dumps(body).replace("{reference}", reference).encode()
        )
        return Response(
            content,
            status_code=b.preparation_status,
            media_type=b.preparation_type,
            headers=b.preparation_headers,
        )

    async def rpc(self, request: Request) -> Response:
        received = await self.record(request)
        call = received.json()
        sent = call["params"]["message"]
        task_id, context_id = str(uuid.uuid4()), str(uuid.uuid4())
        b = self.behaviour
        [part] = sent["parts"]
        reference = part["data"]["reference"]
        exchange_id = self.prepared.get(reference, {}).get("exchangeId", "out-of-band")
        task: dict[str, Any] = {
            "id": task_id,
            "contextId": context_id,
            "status": {"state": b.task_state},
            "history": [{**sent, "taskId": task_id, "contextId": context_id}],
        }
        if b.status_text:
            task["status"]["message"] = {
                "messageId": str(uuid.uuid4()),
                "role": "ROLE_AGENT",
                "parts": [{"text": b.status_text}],
            }
        if b.task_state == "TASK_STATE_COMPLETED":
            receipt = b.receipt or {
                "exchangeId": exchange_id,
                "reference": reference,
                "status": "submitted",
                "completedAt": int(time.time() * 1000),
                "processingMode": wire.PROCESSING_MODE,
                "modelObservedSecret": False,
            }
            task["artifacts"] = [
                {
                    "artifactId": wire.RECEIPT_ARTIFACT_ID,
                    "parts": [{"data": receipt, "mediaType": b.receipt_media_type}],
                }
            ]
        return JSONResponse({"jsonrpc": "2.0", "id": call["id"], "result": {"task": task}})


class Sink(LoopbackServer):
    """Any origin that is not the recipient's: records every request and answers 200 ``{}``."""

    what = "the sink"

    def __init__(self) -> None:
        super().__init__()
        self.received: list[Received] = []

        async def anything(request: Request) -> Response:
            body = await request.body()
            self.received.append(Received(request.method, request.url.path, dict(request.headers), body))
            return Response(b"{}", media_type=wire.PREPARATION_MEDIA_TYPE)

        self.listen(Starlette(routes=[Route("/{path:path}", anything, methods=["GET", "POST", "PUT"])]))


class Proxy(LoopbackServer):
    """Forwards every request to ``upstream`` (the live stack's origin) as it came, but serves cards
    with the upstream origin replaced by its own and only their A2A 0.3 interfaces: a client that
    reads the card here speaks 0.3, to the real gateway behind."""

    what = "the 0.3 proxy"

    def __init__(self, upstream: str) -> None:
        super().__init__()
        self.upstream = upstream
        # The JSON-RPC methods it forwarded, in order.
        self.methods: list[str] = []
        self.listen(Starlette(routes=[Route("/{path:path}", self.forward, methods=["GET", "POST"])]))

    async def forward(self, request: Request) -> Response:
        headers = {
            name: value
            for name, value in request.headers.items()
            if name not in ("host", "content-length", "connection")
        }
        body = await request.body()
        if request.method == "POST" and not request.url.path.endswith(wire.PREPARATION_PATH):
            self.methods.append(json.loads(body)["method"])
        async with httpx.AsyncClient(timeout=60) as http:
            answer = await http.request(
                request.method,
                f"{self.upstream}{request.url.path}",
                headers=headers,
                content=body,
            )
        body = answer.content
        if request.url.path.endswith("/.well-known/agent-card.json") and answer.status_code == 200:
            card = json.loads(body.decode().replace(self.upstream, self.origin))
            card["supportedInterfaces"] = [
                i for i in card["supportedInterfaces"] if i["protocolVersion"] == "0.3"
            ]
            body = json.dumps(card).encode()
        kept = {
            name: value
            for name, value in answer.headers.items()
            if name.lower() in ("content-type", "cache-control", "location")
        }
        return Response(body, status_code=answer.status_code, headers=kept)
