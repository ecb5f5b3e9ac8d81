"""Agent Exchange at the public endpoint: the preparation route, the message gate, the receipt.

The profile is docs/agent-exchange.md; its rules live in :mod:`exchange.services`. Here is what
the gateway adds: where a call came to (:func:`endpoint`), which messages are Agent Exchange
messages and which must be (:func:`gate`), and how the answer travels (:func:`answer`: a
COMPLETED task whose one artifact is the receipt, or a REJECTED one saying why).
"""

from __future__ import annotations

import json

from a2a.helpers import new_data_part, new_task_from_user_message, new_text_message
from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Message
from a2a.utils.errors import ExtensionSupportRequiredError, InvalidParamsError
from asgiref.sync import sync_to_async
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from a2a_gateway import caps
from a2a_gateway.errors import Refused
from a2a_gateway.hosts import HOST_NAME
from a2a_gateway.store import owner_for
from agents.addresses import agent_url, endpoint_url
from agents.models import Agent
from exchange import services, wire
from exchange.models import ExchangeProfile
from parley import strict_json

# Where the gateway leaves, in the call context's state, the reference of an Agent Exchange message.
FOR_EXCHANGE = "for_exchange"
NO_STORE = {"Cache-Control": "no-store"}
HTTP_BAD_REQUEST = 400
HTTP_UNSUPPORTED_MEDIA_TYPE = 415
# The code of A2A 1.0's ExtensionSupportRequiredError, which the 0.3 wire does not define.
EXTENSION_REQUIRED_CODE = -32008
_REQUIRED = (
    f"This agent takes only Agent Exchange messages: activate {wire.EXTENSION_URI} with the "
    "A2A-Extensions header and list it in message.extensions."
)
_NOT_ACTIVATED = (
    f"A message carrying an Agent Exchange reference must activate {wire.EXTENSION_URI} with the "
    "A2A-Extensions header and list it in message.extensions."
)


def endpoint(agent: Agent, host_name: str | None) -> services.Endpoint:
    """The A2A URL a call on ``host_name`` (None: ``PUBLIC_BASE_URL``) reached, and the default audience."""
    return services.Endpoint(url=endpoint_url(agent, host_name=host_name), audience=agent_url(agent))


async def preparation(request: Request) -> Response:
    """``POST …/agent-exchange/preparation``: store a complete request and answer its reference.

    The edge has resolved the agent, authenticated the caller and bounded the body. Answers 200
    ``{"reference"}`` in the preparation media type; 415 for another content type; 429 with
    ``Retry-After`` past the caller's rate (:func:`a2a_gateway.caps.rate_check`, shared with its
    messages); else the status of :class:`exchange.services.ExchangeRefused`; errors as
    ``{"error": {"code", "message"}}``.
    Every answer is ``Cache-Control: no-store``.
    """
    state = request.scope["state"]
    agent: Agent = state["agent"]
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != wire.PREPARATION_MEDIA_TYPE:
        return _error(HTTP_UNSUPPORTED_MEDIA_TYPE, f"Send the request as {wire.PREPARATION_MEDIA_TYPE}.")
    try:
        body = strict_json.loads((await request.body()).decode())
    except (UnicodeDecodeError, ValueError) as exc:
        return _error(HTTP_BAD_REQUEST, f"The body is not JSON: {exc}")
    caller = request.scope["user"]
    try:
        await caps.rate_check(agent, owner_for(agent, caller.identity))
    except Refused as refusal:
        return _error(refusal.status, refusal.message, headers=refusal.headers)
    try:
        reference = await sync_to_async(services.prepare)(
            agent=agent,
            caller=caller.identity,
            authenticated=caller.is_authenticated,
            body=body,
            endpoint=endpoint(agent, state.get(HOST_NAME)),
        )
    except services.ExchangeRefused as refusal:
        return _error(refusal.status, refusal.message)
    return Response(
        json.dumps({"reference": reference}), media_type=wire.PREPARATION_MEDIA_TYPE, headers=NO_STORE
    )


def _error(status: int, message: str, *, headers: dict[str, str] | None = None) -> JSONResponse:
    code = {400: "invalid", 401: "unauthenticated", 404: "not_found", 409: "replay", 415: "media_type"}
    return JSONResponse(
        {"error": {"code": code.get(status, "refused"), "message": message}},
        status_code=status,
        headers={**NO_STORE, **(headers or {})},
    )


async def _profile(agent: Agent) -> ExchangeProfile | None:
    """``agent``'s Agent Exchange profile, if it has one: read with the agent at the edge
    (``select_related``), else here."""
    if Agent.exchange_profile.is_cached(agent):
        try:
            profile: ExchangeProfile | None = agent.exchange_profile
        except ExchangeProfile.DoesNotExist:
            profile = None
        return profile if profile is None or profile.tenant_id == agent.tenant_id else None
    return await ExchangeProfile.objects.for_tenant(agent.tenant_id).filter(agent=agent).afirst()


async def gate(context: ServerCallContext, message: Message, *, wire_0_3: bool) -> str | None:
    """The reference ``message`` carries when it is an Agent Exchange message, else None.

    Raises the spec's ExtensionSupportRequiredError (-32008; on the 0.3 wire, which has no such
    code, :class:`Refused` 400 with it) for a message that presents itself as one
    (:func:`exchange.wire.claims_exchange`) without activating the extension in both places —
    the A2A-Extensions header and ``message.extensions`` — and for any message to an agent whose
    card requires the extension that does not; InvalidParamsError (-32602) for an Agent Exchange
    message whose one data part is not ``{"reference": "sha256:…"}``, or that names a ``taskId``.
    """
    agent: Agent = context.state["agent"]
    profile = await _profile(agent)
    required = profile is not None and profile.mode == ExchangeProfile.Mode.REQUIRED
    activated = (
        wire.EXTENSION_URI in context.requested_extensions and wire.EXTENSION_URI in message.extensions
    )
    claimed = wire.claims_exchange(message)
    if (claimed or required) and not activated:
        said = _NOT_ACTIVATED if claimed else _REQUIRED
        if wire_0_3:
            raise Refused(said, code=EXTENSION_REQUIRED_CODE, status=HTTP_BAD_REQUEST)
        raise ExtensionSupportRequiredError(message=said)
    try:
        data = wire.exchange_part(message)
        reference = None if data is None else wire.check_reference_data(data)
    except wire.WireError as exc:
        raise InvalidParamsError(message=str(exc)) from None
    if reference is not None and message.task_id:
        # Its task is its own: on another (a negotiation's), the receipt would end that task.
        raise InvalidParamsError(
            message="An Agent Exchange message starts a task of its own: send it without taskId."
        )
    return reference


async def answer(agent: Agent, context: RequestContext, event_queue: EventQueue, reference: str) -> None:
    """Execute the request under ``reference`` (:func:`exchange.services.execute`) and end the task:
    COMPLETED with the receipt as its one artifact, or REJECTED with a message saying why."""
    if context.message is None or not context.task_id or not context.context_id:
        raise InvalidParamsError(message="The request carries no message.")
    if context.current_task is None:
        await event_queue.enqueue_event(new_task_from_user_message(context.message))
    updater = TaskUpdater(event_queue, context.task_id, context.context_id)
    caller = context.call_context.user
    if not caller.is_authenticated:
        await updater.reject(_said(services.UNAUTHENTICATED, context))
        return
    host_name = context.call_context.state.get("edge", {}).get(HOST_NAME)
    try:
        receipt = await sync_to_async(services.execute)(
            agent=agent, caller=caller.user_name, reference=reference, endpoint=endpoint(agent, host_name)
        )
    except services.ExchangeRefused as refusal:
        await updater.reject(_said(refusal.message, context))
        return
    part = new_data_part(receipt, media_type=wire.RECEIPT_MEDIA_TYPE)
    await updater.add_artifact([part], artifact_id=wire.RECEIPT_ARTIFACT_ID, name="Agent Exchange receipt")
    await updater.complete()


def _said(text: str, context: RequestContext) -> Message:
    return new_text_message(text, context_id=context.context_id, task_id=context.task_id)
