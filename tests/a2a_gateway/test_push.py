"""Push notifications: the config operations at A2A 1.0 and 0.3, the private-address refusal, delivery.

The live stack refuses push URLs that resolve to private, loopback or
link-local addresses (``A2A_PUSH_ALLOW_PRIVATE`` off, the default). Delivery
and the config operations run against a second web process on the same
database with the setting on, so that a receiver on loopback can be reached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import get_message_text
from a2a.types import (
    AgentCard,
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError
from asgiref.sync import sync_to_async
from django.db import connections
from google.protobuf.json_format import MessageToDict

from a2a_gateway.models import A2ATask, PushConfig
from a2a_gateway.push import DjangoPushConfigStore, PublicOnlyTransport, PushURLRefused, vetted_address
from agents.models import Agent
from negotiations.models import Negotiation
from negotiations.services import inbound, parking
from parley.celery import app as celery_app
from tests.a2a_gateway.conftest import Endpoint, counts, endpoint_of, proposal, run, user_message
from tests.a2a_gateway.servers import PushReceiver, on_wire, web_process
from tests.conftest import LiveStack, principal_member, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WIRES = ["1.0", "0.3"]
REFUSED = "Invalid push notification URL"


@pytest.fixture(scope="module")
def private_pushes_origin(live_stack: LiveStack) -> Iterator[str]:
    """A second web process that pushes to private addresses too (``A2A_PUSH_ALLOW_PRIVATE``)."""
    with web_process(live_stack, A2A_PUSH_ALLOW_PRIVATE="true") as origin:
        yield origin


@pytest.fixture
def receiver() -> Iterator[PushReceiver]:
    with PushReceiver() as server:
        yield server


def seller_at(origin: str, seller: Agent) -> Endpoint:
    return Endpoint(agent=seller, url=f"{origin}/a2a/{seller.tenant.slug}/{seller.slug}")


def with_client(card: AgentCard, call: Any, **config: Any) -> Any:
    """``await call(client)``, a2a-sdk's non-streaming client for ``card`` (``config``: ClientConfig's)."""

    async def main(http: httpx.AsyncClient) -> Any:
        factory = ClientFactory(ClientConfig(httpx_client=http, streaming=False, **config))
        return await call(factory.create(card))

    return run(main)


# The policy


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost:9/hook",
        "http://10.1.2.3/hook",
        "http://172.16.0.1/hook",
        "http://192.168.1.1/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.64.0.1/hook",
        "http://0.0.0.0/hook",
        "http://224.0.0.1/hook",
        "http://[::1]/hook",
        "http://[fe80::1]/hook",
        "http://[fc00::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "https://push.invalid/hook",
        "ftp://8.8.8.8/hook",
        "http:///hook",
        "http://[::1/hook",
    ],
)
def test_a_url_that_is_not_public_is_refused(settings: Any, url: str) -> None:
    settings.A2A_PUSH_ALLOW_PRIVATE = False

    with pytest.raises(PushURLRefused):
        asyncio.run(vetted_address(url))


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("https://8.8.8.8/hook", "8.8.8.8"),
        ("http://[2606:4700:4700::1111]:8080/hook", "2606:4700:4700::1111"),
    ],
)
def test_a_public_address_is_the_one_delivered_to(settings: Any, url: str, address: str) -> None:
    settings.A2A_PUSH_ALLOW_PRIVATE = False

    assert asyncio.run(vetted_address(url)) == address


def test_allowing_private_addresses_still_wants_http(settings: Any) -> None:
    settings.A2A_PUSH_ALLOW_PRIVATE = True

    assert asyncio.run(vetted_address("http://127.0.0.1:9/hook")) == "127.0.0.1"
    with pytest.raises(PushURLRefused):
        asyncio.run(vetted_address("file:///etc/passwd"))


@pytest.mark.parametrize(("allow", "delivered"), [(False, 0), (True, 1)])
def test_the_transport_checks_the_address_it_connects_to(
    settings: Any, receiver: PushReceiver, allow: bool, delivered: int
) -> None:
    settings.A2A_PUSH_ALLOW_PRIVATE = allow

    async def post() -> int:
        async with httpx.AsyncClient(transport=PublicOnlyTransport()) as http:
            return (await http.post(receiver.url, json={"ping": 1})).status_code

    if allow:
        assert asyncio.run(post()) == 204
    else:
        with pytest.raises(
            httpx.ConnectError, match=r"^the host '127\.0\.0\.1' resolves to a private address"
        ):
            asyncio.run(post())
    assert len(receiver.received) == delivered


# Refused on the live stack


@pytest.mark.parametrize(
    ("method", "version", "params"),
    [
        (
            "CreateTaskPushNotificationConfig",
            "1.0",
            lambda task_id, url: {"taskId": task_id, "id": "c1", "url": url},
        ),
        (
            "tasks/pushNotificationConfig/set",
            None,
            lambda task_id, url: {"taskId": task_id, "pushNotificationConfig": {"id": "c1", "url": url}},
        ),
    ],
)
@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hook", "http://169.254.169.254/", "http://[::1]:9/"])
def test_setting_a_private_push_url_is_invalid_params_on_both_wires(
    seller_endpoint: Endpoint, method: str, version: str | None, params: Any, url: str
) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))

    response = seller_endpoint.rpc(method, params(task.id, url), version=version)

    assert response.status_code == 200
    error = response.json()["error"]
    assert (error["code"], error["message"]) == (-32602, REFUSED)
    assert not PushConfig.across_tenants.exists()


def test_a_message_with_a_private_push_url_is_refused_before_anything_is_written(
    seller_endpoint: Endpoint,
) -> None:
    params = {
        "message": MessageToDict(user_message(proposal(800))),
        "configuration": {"taskPushNotificationConfig": {"url": "http://127.0.0.1:9/hook", "token": "t"}},
    }

    response = seller_endpoint.rpc("SendMessage", params)

    error = response.json()["error"]
    assert (error["code"], error["message"]) == (-32602, REFUSED)
    assert counts() == {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}
    assert not PushConfig.across_tenants.exists()


# Delivered, and managed, where private addresses are allowed


@pytest.mark.parametrize("wire", WIRES)
def test_every_event_of_a_turn_is_pushed_in_order_with_the_callers_token(
    private_pushes_origin: str, seller: Agent, receiver: PushReceiver, wire: str
) -> None:
    endpoint = seller_at(private_pushes_origin, seller)
    card = on_wire(endpoint.card(), wire)
    push = TaskPushNotificationConfig(
        url=receiver.url,
        token="tok-1",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="cred-1"),
    )

    async def send(client: Any) -> Task:
        [event] = [
            e async for e in client.send_message(SendMessageRequest(message=user_message(proposal(800))))
        ]
        return event.task

    task = with_client(card, send, push_notification_config=push)

    def final_pushed() -> bool:
        bodies = receiver.bodies()
        return (
            bool(bodies)
            and "statusUpdate" in bodies[-1]
            and bodies[-1]["statusUpdate"]["status"]["state"] != "TASK_STATE_WORKING"
        )

    wait_until(final_pushed, what="the turn's last push")
    kinds = [
        (kind, body[kind].get("status", {}).get("state") or body[kind].get("artifact", {}).get("artifactId"))
        for body in receiver.bodies()
        for kind in body
    ]
    assert kinds == [
        ("task", "TASK_STATE_SUBMITTED"),
        ("statusUpdate", "TASK_STATE_WORKING"),
        ("statusUpdate", "TASK_STATE_WORKING"),
        ("artifactUpdate", "negotiator:reply"),
        ("statusUpdate", "TASK_STATE_INPUT_REQUIRED"),
    ]
    bodies = receiver.bodies()
    assert {b[next(iter(b))].get("taskId", b[next(iter(b))].get("id")) for b in bodies} == {task.id}
    assert bodies[2]["statusUpdate"]["status"]["message"] == MessageToDict(task.history[-1])
    for headers, _ in receiver.received:
        assert headers["x-a2a-notification-token"] == "tok-1"
        assert headers["authorization"] == "Bearer cred-1"
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    [config] = PushConfig.across_tenants.all()
    assert (config.task_id, config.config_id, config.agent_id) == (task.id, task.id, seller.pk)


@pytest.mark.parametrize("wire", WIRES)
def test_push_configs_are_created_listed_read_and_deleted_on_both_wires(
    private_pushes_origin: str, seller: Agent, receiver: PushReceiver, wire: str
) -> None:
    endpoint = seller_at(private_pushes_origin, seller)
    card = on_wire(endpoint.card(), wire)
    task = endpoint.send(user_message(proposal(800)), card=card)

    async def manage(client: Any) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for config_id in ("c1", "c2"):
            config = TaskPushNotificationConfig(
                task_id=task.id, id=config_id, url=f"{receiver.url}?{config_id}"
            )
            seen[f"created {config_id}"] = await client.create_task_push_notification_config(config)
        listing = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        seen["listed"] = [c.id for c in listing.configs]
        seen["read"] = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
        )
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
        )
        listing = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        seen["left"] = [c.id for c in listing.configs]
        try:
            await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
            )
        except TaskNotFoundError as exc:
            seen["read deleted"] = exc
        return seen

    seen = with_client(card, manage)

    created = seen["created c1"]
    assert (created.task_id, created.id, created.url) == (task.id, "c1", f"{receiver.url}?c1")
    assert seen["listed"] == ["c1", "c2"]
    assert seen["read"] == created
    assert seen["left"] == ["c2"]
    assert isinstance(seen["read deleted"], TaskNotFoundError)
    assert list(PushConfig.across_tenants.values_list("config_id", flat=True)) == ["c2"]


@pytest.mark.parametrize(
    ("method", "version", "params"),
    [
        ("GetTaskPushNotificationConfig", "1.0", lambda task_id: {"taskId": task_id, "id": "c1"}),
        ("ListTaskPushNotificationConfigs", "1.0", lambda task_id: {"taskId": task_id}),
        ("DeleteTaskPushNotificationConfig", "1.0", lambda task_id: {"taskId": task_id, "id": "c1"}),
        (
            "tasks/pushNotificationConfig/get",
            None,
            lambda task_id: {"id": task_id, "pushNotificationConfigId": "c1"},
        ),
        ("tasks/pushNotificationConfig/list", None, lambda task_id: {"id": task_id}),
        (
            "tasks/pushNotificationConfig/delete",
            None,
            lambda task_id: {"id": task_id, "pushNotificationConfigId": "c1"},
        ),
    ],
)
def test_another_agents_task_has_no_push_configs_for_the_caller(
    private_pushes_origin: str,
    live_stack: LiveStack,
    seller: Agent,
    agent: Agent,
    receiver: PushReceiver,
    method: str,
    version: str | None,
    params: Any,
) -> None:
    """A task of the seller's, asked about at another agent's URL: -32001 on both wires, and the
    config stays."""
    seller_endpoint = seller_at(private_pushes_origin, seller)
    task = seller_endpoint.send(user_message(proposal(800)))
    created = seller_endpoint.rpc(
        "CreateTaskPushNotificationConfig", {"taskId": task.id, "id": "c1", "url": receiver.url}
    )
    assert created.json()["result"]["id"] == "c1"

    response = endpoint_of(live_stack, agent).rpc(method, params(task.id), version=version)

    error = response.json()["error"]
    assert (error["code"], error["message"]) == (-32001, "Task not found")
    assert list(PushConfig.across_tenants.values_list("config_id", flat=True)) == ["c1"]


# Which configs an event goes to


def test_an_event_goes_to_the_configs_of_the_tasks_own_partition_only(seller: Agent, agent: Agent) -> None:
    """The task's caller's configs, oldest first; one stored for the same task id under another
    partition (another caller, another tenant) gets nothing, nor does a config without its task."""
    A2ATask.objects.create(
        tenant=seller.tenant,
        agent=seller,
        owner="seller|key:a",
        task_id="t-1",
        context_id="c",
        state="s",
        data={},
    )
    for owner, tenant, agent_of, config_id in [
        ("seller|key:a", seller.tenant, seller, "first"),
        ("seller|key:b", seller.tenant, seller, "another caller"),
        ("seller|key:a", agent.tenant, agent, "another tenant"),
        ("seller|key:a", seller.tenant, seller, "second"),
    ]:
        PushConfig.objects.create(
            tenant=tenant,
            agent=agent_of,
            owner=owner,
            task_id="t-1",
            config_id=config_id,
            data={"id": config_id, "taskId": "t-1", "url": f"https://push.example/{config_id}"},
        )
    PushConfig.objects.create(
        tenant=seller.tenant,
        agent=seller,
        owner="seller|key:a",
        task_id="t-2",
        config_id="x",
        data={"id": "x"},
    )

    async def dispatch(task_id: str) -> list[str]:
        try:
            return [c.id for c in await DjangoPushConfigStore().get_info_for_dispatch(task_id)]
        finally:
            await sync_to_async(connections.close_all)()

    assert asyncio.run(dispatch("t-1")) == ["first", "second"]
    assert asyncio.run(dispatch("t-2")) == []
    assert asyncio.run(dispatch("t-3")) == []


# The reply to an inbound ask, pushed at once once the party answers


@pytest.fixture
def asking_seller(seller: Agent) -> Agent:
    """The seller without its floor: its offline negotiator asks its party, Idris, for the limit."""
    seller.term_guards = []
    seller.principal = principal_member(seller.tenant, "idris")
    seller.save()
    return seller


@pytest.fixture
def tasks_here(settings: Any) -> Iterator[None]:
    """Celery tasks sent from this process run in it, at once, with pushes to loopback allowed: the
    live worker pushes to public addresses only (``A2A_PUSH_ALLOW_PRIVATE`` off)."""
    settings.A2A_PUSH_ALLOW_PRIVATE = True
    before = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = celery_app.conf.task_eager_propagates = True
    yield
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = before


@pytest.mark.parametrize("wire", WIRES)
def test_the_reply_to_an_inbound_ask_is_pushed_as_soon_as_the_party_answers(
    private_pushes_origin: str, asking_seller: Agent, receiver: PushReceiver, tasks_here: None, wire: str
) -> None:
    endpoint = seller_at(private_pushes_origin, asking_seller)
    card = on_wire(endpoint.card(), wire)
    push = TaskPushNotificationConfig(url=receiver.url, token="tok-1")

    async def send(client: Any) -> Task:
        [event] = [
            e async for e in client.send_message(SendMessageRequest(message=user_message(proposal(800))))
        ]
        return event.task

    held = with_client(card, send, push_notification_config=push)
    assert held.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert get_message_text(held.history[-1]) == inbound.HOLDING_TEXT
    wait_until(lambda: len(receiver.received) == 5, what="the pushes of the holding reply's turn")
    negotiation = Negotiation.across_tenants.get(agent=asking_seller, task_id=held.id)

    parking.negotiation_guidance_give(negotiation=negotiation, answer="At least €1,000 a day.", user=None)

    [(headers, body)] = receiver.received[5:]
    assert headers["x-a2a-notification-token"] == "tok-1"
    pushed = body["task"]
    reply = pushed["history"][-1]
    assert [m["messageId"] for m in pushed["history"][:-1]] == [m.message_id for m in held.history]
    assert (reply["role"], reply["taskId"], reply["contextId"]) == ("ROLE_AGENT", held.id, held.context_id)
    [part] = reply["parts"]
    assert (part["data"]["action"], part["data"]["terms"]) == ("propose", {"amount": 1429, "currency": "EUR"})
    assert pushed["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert [(a["artifactId"], a["parts"]) for a in pushed["artifacts"]] == [("negotiator:reply", [part])]
    # The stored Task is the one pushed, as GetTask reads it on the caller's wire.
    stored = with_client(card, lambda client: client.get_task(GetTaskRequest(id=held.id)))
    assert MessageToDict(stored) == pushed
    # Recorded as our turn, the move that went out.
    assert list(negotiation.turns.order_by("seq").values_list("side", "action")) == [
        ("theirs", "propose"),
        ("ours", ""),
        ("ours", "propose"),
    ]
    assert negotiation.turns.get(seq=3).raw == reply
    negotiation.refresh_from_db()
    assert (negotiation.status, negotiation.turn_count, negotiation.guidance) == (
        Negotiation.Status.OPEN,
        1,
        ["At least €1,000 a day."],
    )


def test_without_a_push_config_the_answer_waits_for_their_next_message(
    seller_endpoint: Endpoint, asking_seller: Agent, tasks_here: None
) -> None:
    held = seller_endpoint.send(user_message(proposal(800)))
    negotiation = Negotiation.across_tenants.get(agent=asking_seller, task_id=held.id)

    parking.negotiation_guidance_give(negotiation=negotiation, answer="At least €1,000 a day.", user=None)

    assert negotiation.turns.count() == 2
    assert A2ATask.across_tenants.get(task_id=held.id).data["history"][-1]["parts"] == [
        {"text": inbound.HOLDING_TEXT}
    ]
