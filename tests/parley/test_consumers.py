"""The live socket over the real ASGI application: who may connect, and which events reach whom.

Events are published the way services publish them (``parley.live.publish_on_commit``)
through the in-memory channel layer, so what is asserted is what a browser receives.
"""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import AbstractUser
from django.contrib.sessions.models import Session
from django.test import Client

from parley import live
from parley.asgi import application
from parley.consumers import CLOSE_STALE, CLOSE_UNAUTHENTICATED
from parley.models import Membership, Tenant

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1:8000")


@pytest.fixture(autouse=True)
def in_memory_layer(settings: Any) -> None:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.fixture
def session_cookie(client: Client, principal: AbstractUser) -> tuple[bytes, bytes]:
    """The ``Cookie`` header of a logged-in session of the principal (a member of ``acme`` only)."""
    client.force_login(principal)
    name = django_settings.SESSION_COOKIE_NAME
    return (b"cookie", f"{name}={client.cookies[name].value}".encode())


def socket(*headers: tuple[bytes, bytes]) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/live/", headers=list(headers))


async def publish(event: str, tenant_id: int, **payload: Any) -> None:
    await database_sync_to_async(live.publish_on_commit)(event=event, tenant_id=tenant_id, payload=payload)


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
    session_cookie: tuple[bytes, bytes], tenant: Tenant, other_tenant: Tenant
) -> None:
    communicator = socket(ORIGIN, session_cookie)
    assert (await communicator.connect())[0] is True

    await publish("run.updated", other_tenant.pk, run="theirs", status="running")
    await publish("question.opened", tenant.pk, question="q-1", run="r-1")

    assert await communicator.receive_json_from(timeout=2) == {
        "event": "question.opened",
        "payload": {"question": "q-1", "run": "r-1"},
    }
    assert await communicator.receive_nothing(timeout=0.2) is True
    await communicator.disconnect()


async def test_frames_from_the_browser_are_ignored(
    session_cookie: tuple[bytes, bytes], tenant: Tenant
) -> None:
    communicator = socket(ORIGIN, session_cookie)
    await communicator.connect()

    await communicator.send_to(text_data="not json")
    await communicator.send_to(bytes_data=b"\x00")
    await publish("run.updated", tenant.pk, run="r-1", status="done")

    assert (await communicator.receive_json_from(timeout=2))["event"] == "run.updated"
    await communicator.disconnect()


async def test_leaving_the_tenant_closes_the_socket_before_the_next_event(
    session_cookie: tuple[bytes, bytes], principal: AbstractUser, tenant: Tenant
) -> None:
    communicator = socket(ORIGIN, session_cookie)
    await communicator.connect()

    await database_sync_to_async(Membership.objects.filter(user=principal, tenant=tenant).delete)()
    await publish("question.opened", tenant.pk, question="q-1", run="r-1")

    assert await communicator.receive_output(timeout=2) == {"type": "websocket.close", "code": CLOSE_STALE}
    await communicator.disconnect()


async def test_logging_out_elsewhere_closes_the_socket_before_the_next_event(
    session_cookie: tuple[bytes, bytes], tenant: Tenant
) -> None:
    communicator = socket(ORIGIN, session_cookie)
    await communicator.connect()

    await database_sync_to_async(Session.objects.all().delete)()
    await publish("question.opened", tenant.pk, question="q-1", run="r-1")

    assert await communicator.receive_output(timeout=2) == {"type": "websocket.close", "code": CLOSE_STALE}
    await communicator.disconnect()
