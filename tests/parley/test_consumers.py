"""The live socket over the real ASGI application: who may connect, and which events reach whom.

Events are published the way services publish them (``parley.live.publish_on_commit``)
through the in-memory channel layer, so what is asserted is what a browser receives.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import AbstractUser
from django.contrib.sessions.models import Session
from django.test import Client

from agents.models import Agent
from parley import live
from parley.asgi import application
from parley.consumers import CLOSE_STALE, CLOSE_UNAUTHENTICATED
from parley.models import Membership, Tenant
from tests.parley.tenancy import member

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1:8000")


@pytest.fixture(autouse=True)
def in_memory_layer(settings: Any) -> None:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # Re-check on every stored event, so each test's change is seen at its next event; the
    # window itself is tested on its own below.
    settings.LIVE_RECHECK_SECONDS = 0


@pytest.fixture
def session_cookie(client: Client, principal: AbstractUser) -> tuple[bytes, bytes]:
    """The ``Cookie`` header of a logged-in session of the principal (a member of ``acme`` only)."""
    client.force_login(principal)
    name = django_settings.SESSION_COOKIE_NAME
    return (b"cookie", f"{name}={client.cookies[name].value}".encode())


def socket(*headers: tuple[bytes, bytes]) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/live/", headers=list(headers))


async def publish(event: str, tenant_id: int, party: AbstractUser | None = None, **payload: Any) -> None:
    """Publish as a service does, for the tenant's staff and, if given, the party ``party``."""
    await database_sync_to_async(live.publish_on_commit)(
        event=event, tenant_id=tenant_id, party_id=party.pk if party else None, payload=payload
    )


async def test_an_anonymous_socket_is_refused(tenant: Tenant) -> None:
    connected, code = await socket(ORIGIN).connect()

    assert (connected, code) == (False, CLOSE_UNAUTHENTICATED)


async def test_a_socket_from_another_origin_is_refused(session_cookie: tuple[bytes, bytes]) -> None:
    for origin in (b"https://evil.example", b"http://127.0.0.1.evil.example"):
        connected, _ = await socket((b"origin", origin), session_cookie).connect()
        assert connected is False


async def test_a_socket_without_an_origin_is_refused(session_cookie: tuple[bytes, bytes]) -> None:
    connected, _ = await socket(session_cookie).connect()

    assert connected is False


async def test_a_member_receives_their_tenants_events_and_not_anothers(
    session_cookie: tuple[bytes, bytes], principal: AbstractUser, tenant: Tenant, other_tenant: Tenant
) -> None:
    communicator = socket(ORIGIN, session_cookie)
    assert (await communicator.connect())[0] is True

    await publish("run.updated", other_tenant.pk, run="theirs", status="running")
    await publish("question.opened", tenant.pk, principal, question="q-1", run="r-1")

    assert await communicator.receive_json_from(timeout=2) == {
        "event": "question.opened",
        "payload": {"question": "q-1", "run": "r-1"},
    }
    assert await communicator.receive_nothing(timeout=0.2) is True
    await communicator.disconnect()


async def test_frames_from_the_browser_are_ignored(
    session_cookie: tuple[bytes, bytes], principal: AbstractUser, tenant: Tenant
) -> None:
    communicator = socket(ORIGIN, session_cookie)
    await communicator.connect()

    await communicator.send_to(text_data="not json")
    await communicator.send_to(bytes_data=b"\x00")
    await publish("run.updated", tenant.pk, principal, run="r-1", status="done")

    assert (await communicator.receive_json_from(timeout=2))["event"] == "run.updated"
    await communicator.disconnect()


async def test_leaving_the_tenant_closes_the_socket_before_the_next_event(
    session_cookie: tuple[bytes, bytes], principal: AbstractUser, tenant: Tenant
) -> None:
    communicator = socket(ORIGIN, session_cookie)
    await communicator.connect()

    await database_sync_to_async(Membership.objects.filter(user=principal, tenant=tenant).delete)()
    await publish("question.opened", tenant.pk, principal, question="q-1", run="r-1")

    assert await communicator.receive_output(timeout=2) == {"type": "websocket.close", "code": CLOSE_STALE}
    await communicator.disconnect()


async def test_logging_out_elsewhere_closes_the_socket_before_the_next_event(
    session_cookie: tuple[bytes, bytes], principal: AbstractUser, tenant: Tenant
) -> None:
    communicator = socket(ORIGIN, session_cookie)
    await communicator.connect()

    await database_sync_to_async(Session.objects.all().delete)()
    await publish("question.opened", tenant.pk, principal, question="q-1", run="r-1")

    assert await communicator.receive_output(timeout=2) == {"type": "websocket.close", "code": CLOSE_STALE}
    await communicator.disconnect()


async def test_a_new_role_closes_the_socket_before_the_next_event(
    session_cookie: tuple[bytes, bytes], principal: AbstractUser, tenant: Tenant
) -> None:
    # The page re-renders for the role it has now once it reconnects: a viewer's has no answer boxes.
    communicator = socket(ORIGIN, session_cookie)
    await communicator.connect()

    await database_sync_to_async(Membership.objects.filter(user=principal, tenant=tenant).update)(
        role=Membership.Role.VIEWER
    )
    await publish("question.opened", tenant.pk, principal, question="q-1", run="r-1")

    assert await communicator.receive_output(timeout=2) == {"type": "websocket.close", "code": CLOSE_STALE}
    await communicator.disconnect()


async def test_another_members_new_role_leaves_the_socket_open(
    session_cookie: tuple[bytes, bytes], principal: AbstractUser, operator: AbstractUser, tenant: Tenant
) -> None:
    communicator = socket(ORIGIN, session_cookie)
    await communicator.connect()

    await database_sync_to_async(Membership.objects.filter(user=operator, tenant=tenant).update)(
        role=Membership.Role.VIEWER
    )
    await publish("question.opened", tenant.pk, principal, question="q-1", run="r-1")

    assert (await communicator.receive_json_from(timeout=2))["event"] == "question.opened"
    await communicator.disconnect()


def priyas_agent(tenant: Tenant) -> Agent:
    """Another party of the tenant, Priya, and her agent."""
    priya = member(tenant, "priya", Membership.Role.PRINCIPAL)
    return Agent.objects.create(tenant=tenant, slug="priya", name="Priya's agent", principal=priya)


async def test_a_partys_socket_gets_only_their_own_agents_events(
    session_cookie: tuple[bytes, bytes], principal: AbstractUser, tenant: Tenant
) -> None:
    priya = (await database_sync_to_async(priyas_agent)(tenant)).principal
    communicator = socket(ORIGIN, session_cookie)
    await communicator.connect()

    await publish("negotiation.turn", tenant.pk, priya, negotiation="hers", terms={"amount": 900})
    await database_sync_to_async(live.push_transient)(
        event="run.delta", tenant_id=tenant.pk, party_id=priya.pk, payload={"run": "hers", "delta": "secret"}
    )
    await publish("negotiation.turn", tenant.pk, principal, negotiation="his", terms={"amount": 1100})

    assert (await communicator.receive_json_from(timeout=2))["payload"]["negotiation"] == "his"
    assert await communicator.receive_nothing(timeout=0.2) is True
    await communicator.disconnect()


@pytest.mark.parametrize("role", [Membership.Role.OWNER, Membership.Role.OPERATOR, Membership.Role.VIEWER])
async def test_staff_sockets_get_every_partys_events(
    client: Client, principal: AbstractUser, tenant: Tenant, role: str
) -> None:
    staff = await database_sync_to_async(member)(tenant, f"staff-{role}", role)
    await database_sync_to_async(client.force_login)(staff)
    name = django_settings.SESSION_COOKIE_NAME
    communicator = socket(ORIGIN, (b"cookie", f"{name}={client.cookies[name].value}".encode()))
    await communicator.connect()

    await publish("question.opened", tenant.pk, principal, question="q-1", run="r-1")

    assert (await communicator.receive_json_from(timeout=2))["event"] == "question.opened"
    await communicator.disconnect()


@pytest.mark.parametrize("change", ["deactivate", "new password"])
async def test_an_account_no_longer_signed_in_closes_the_socket_before_the_next_event(
    session_cookie: tuple[bytes, bytes], principal: AbstractUser, tenant: Tenant, change: str
) -> None:
    # As over HTTP: a deactivated account, or a password changed elsewhere, ends this session.
    communicator = socket(ORIGIN, session_cookie)
    await communicator.connect()

    def apply() -> None:
        if change == "deactivate":
            principal.is_active = False
        else:
            principal.set_password("another-horse-battery-staple")
        principal.save()

    await database_sync_to_async(apply)()
    await publish("question.opened", tenant.pk, principal, question="q-1", run="r-1")

    assert await communicator.receive_output(timeout=2) == {"type": "websocket.close", "code": CLOSE_STALE}
    await communicator.disconnect()


async def test_within_the_recheck_window_events_flow_and_after_it_a_change_closes_the_socket(
    session_cookie: tuple[bytes, bytes], principal: AbstractUser, tenant: Tenant, settings: Any
) -> None:
    settings.LIVE_RECHECK_SECONDS = 0.5
    communicator = socket(ORIGIN, session_cookie)
    await communicator.connect()

    await database_sync_to_async(Membership.objects.filter(user=principal, tenant=tenant).delete)()
    # Inside the window the socket has not looked again yet: a burst costs no queries.
    await publish("question.opened", tenant.pk, principal, question="q-1", run="r-1")
    assert (await communicator.receive_json_from(timeout=2))["event"] == "question.opened"

    await asyncio.sleep(0.6)
    await publish("question.opened", tenant.pk, principal, question="q-2", run="r-1")
    assert await communicator.receive_output(timeout=2) == {"type": "websocket.close", "code": CLOSE_STALE}
    await communicator.disconnect()
