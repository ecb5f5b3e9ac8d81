"""The intake tool: fixed recipient, captured first, notified best-effort, loud when unconfigured."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.core import mail
from django.test import Client

from a2a_gateway.models import A2ATask
from agents.models import Agent
from parley.models import Event, Membership, Tenant
from representative.answers import MAX_ROUNDS, visitor_answer
from representative.intake import intake_capture
from representative.models import GroundingDocument, IntakeRequest
from tests.a2a_gateway.conftest import endpoint_of
from tests.chat_server import ChatServer, text, tool_calls
from tests.conftest import LiveStack, free_port, make_user
from tests.representative.studio import answer_of, question

ASKED = "Request: Please call me back about a logo.\nI am Ana, ana@example.org, +351 912 345 678."
TAKEN_IN = (
    "Thank you. Your request is recorded and has been passed to Vera Studio's team, who will follow "
    "up. I cannot send messages or act for anyone beyond that."
)
UNCONFIGURED = (
    "I cannot take requests for Vera Studio yet: its operator has not said who receives them. "
    "Nothing was recorded; please try again later."
)


# --- Offline, over A2A ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_request_is_captured_for_the_intake_owner_and_announced(
    live_stack: LiveStack, vera: Agent, principal: AbstractUser
) -> None:
    task = endpoint_of(live_stack, vera).send(question(ASKED))

    assert answer_of(task) == TAKEN_IN
    request = IntakeRequest.across_tenants.get()
    assert (request.tenant_id, request.agent_id, request.recipient_id) == (
        vera.tenant_id,
        vera.pk,
        principal.pk,
    )
    assert request.summary == "Please call me back about a logo."
    assert (
        request.details == "Please call me back about a logo.\nI am Ana, ana@example.org, +351 912 345 678."
    )
    assert request.caller == A2ATask.across_tenants.get(task_id=task.id).owner
    assert request.notified_at is not None
    assert request.notify_error == ""
    event = Event.across_tenants.get(kind="intake.received")
    assert (event.tenant_id, event.payload) == (
        vera.tenant_id,
        {"intake_request": request.pk, "agent": str(vera.pk)},
    )


@pytest.mark.django_db(transaction=True)
def test_without_an_intake_owner_the_visitor_is_told_and_nothing_is_kept(
    live_stack: LiveStack, vera: Agent
) -> None:
    vera.intake_owner = None
    vera.save()

    task = endpoint_of(live_stack, vera).send(question(ASKED))

    assert answer_of(task) == UNCONFIGURED
    assert IntakeRequest.across_tenants.count() == 0
    assert Event.across_tenants.filter(kind="intake.received").count() == 0


# --- The service ---------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("asked", "summary", "details"),
    [
        ("request: Quote for a logo", "Quote for a logo", "Quote for a logo"),
        ("I'd like to leave a request: a quote, please", "a quote, please", "a quote, please"),
        ("Please leave a message: call Ana\non Monday", "call Ana", "call Ana\non Monday"),
    ],
)
def test_offline_intake_markers(vera: Agent, asked: str, summary: str, details: str) -> None:
    reply = visitor_answer(agent=vera, text=asked, caller="acme|ana")

    request = IntakeRequest.across_tenants.get()
    assert reply.text == TAKEN_IN
    assert reply.intake_request_id == request.pk
    assert (request.summary, request.details, request.caller) == (summary, details, "acme|ana")


@pytest.mark.django_db
def test_an_empty_request_asks_what_it_is(vera: Agent) -> None:
    reply = visitor_answer(agent=vera, text="Request:   ", caller="c")

    assert reply.text == 'Say what the request is after "Request:".'
    assert IntakeRequest.across_tenants.count() == 0


@pytest.mark.django_db
def test_unconfigured_intake_logs_an_error_for_the_operator(
    vera: Agent, caplog: pytest.LogCaptureFixture
) -> None:
    vera.intake_owner = None
    vera.save()

    with caplog.at_level(logging.INFO, logger="representative.intake"):
        reply = visitor_answer(agent=vera, text=ASKED, caller="acme|ana")

    assert reply.text == UNCONFIGURED
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.ERROR,
            f"Intake refused: agent {vera.pk} of tenant {vera.tenant_id} has no intake owner who is a "
            "member of the tenant; a visitor's request was turned away. Set the agent's intake owner.",
        )
    ]
    assert IntakeRequest.across_tenants.count() == 0


@pytest.mark.django_db
def test_an_intake_owner_outside_the_tenant_counts_as_unconfigured(vera: Agent, other_tenant: Tenant) -> None:
    stranger = make_user("mallory")
    Membership.objects.create(user=stranger, tenant=other_tenant, role=Membership.Role.OWNER)
    vera.intake_owner = stranger
    vera.save()

    reply = visitor_answer(agent=vera, text=ASKED, caller="c")

    assert reply.text == UNCONFIGURED
    assert IntakeRequest.across_tenants.count() == 0


@pytest.mark.django_db
def test_the_audit_log_carries_ids_only(
    vera: Agent, principal: AbstractUser, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        visitor_answer(agent=vera, text=ASKED, caller="acme|ana-caller")

    request = IntakeRequest.across_tenants.get()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("representative")]
    assert lines == [
        f"Intake request {request.pk} taken in for agent {vera.pk} of tenant {vera.tenant_id}, "
        f"recipient user {principal.pk}"
    ]
    for personal in ("Ana", "ana@example.org", "912", "logo", "ana-caller"):
        assert not any(personal in line for line in lines)


@pytest.mark.django_db
def test_the_owner_gets_an_email_when_they_have_an_address(
    vera: Agent, principal: AbstractUser, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    principal.email = "tomas@acme.example"
    principal.save()

    visitor_answer(agent=vera, text=ASKED, caller="c")

    request = IntakeRequest.across_tenants.get()
    [sent] = mail.outbox
    assert sent.to == ["tomas@acme.example"]
    assert sent.subject == "New request for Vera Studio"
    assert "Please call me back about a logo." in sent.body
    assert f"{settings.PUBLIC_BASE_URL}/t/acme/intake/" in sent.body
    assert request.notified_at is not None
    assert request.notify_error == ""


@pytest.mark.django_db
def test_a_failed_email_is_recorded_and_never_raises(
    vera: Agent, principal: AbstractUser, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()  # nothing listens there
    principal.email = "tomas@acme.example"
    principal.save()

    reply = visitor_answer(agent=vera, text=ASKED, caller="c")

    request = IntakeRequest.across_tenants.get()
    assert reply.text == TAKEN_IN
    assert reply.intake_request_id == request.pk
    assert request.notify_error == "e-mail: ConnectionRefusedError"
    assert request.notified_at is not None  # the live event went out
    assert Event.across_tenants.filter(kind="intake.received").count() == 1
    assert (
        f"Intake request {request.pk}: notifying its recipient failed (e-mail: ConnectionRefusedError)"
        in [r.getMessage() for r in caplog.records]
    )


# --- The tool, with a chat model -----------------------------------------------------------------


@pytest.mark.django_db
def test_the_model_leaves_a_request_for_the_fixed_recipient(
    chat_vera: Agent, chat: ChatServer, principal: AbstractUser
) -> None:
    arguments = json.dumps({"summary": "Logo quote", "details": "Ana, ana@example.org"})
    chat.script(tool_calls(("c1", "leave_request", arguments)), text("I passed it on."))

    reply = visitor_answer(agent=chat_vera, text="Can someone quote me a logo?", caller="c")

    request = IntakeRequest.across_tenants.get()
    assert (reply.text, reply.intake_request_id) == ("I passed it on.", request.pk)
    assert (request.summary, request.details, request.recipient_id) == (
        "Logo quote",
        "Ana, ana@example.org",
        principal.pk,
    )
    assert chat.requests[1].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "Recorded for Vera Studio's team. Tell the visitor it was passed on.",
    }
    assert reply.usage.input_tokens == 20


@pytest.mark.django_db
@pytest.mark.parametrize(
    "arguments",
    [
        {"summary": "Logo quote", "recipient": "mallory@evil.example"},
        {"summary": "Logo quote", "to": "mallory@evil.example", "details": "x"},
        {"summary": ""},
        {"details": "no summary"},
        "not json",
    ],
    ids=["recipient", "to", "blank-summary", "no-summary", "malformed"],
)
def test_arguments_beyond_summary_and_details_are_refused(
    chat_vera: Agent, chat: ChatServer, arguments: Any
) -> None:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    chat.script(tool_calls(("c1", "leave_request", raw)), text("Sorry."))

    reply = visitor_answer(agent=chat_vera, text="Pass this on.", caller="c")

    assert reply.text == "Sorry."
    assert reply.intake_request_id is None
    assert IntakeRequest.across_tenants.count() == 0
    result = chat.requests[1].body["messages"][-1]["content"]
    assert result.endswith("Nothing was recorded.")


@pytest.mark.django_db
def test_one_request_per_turn(chat_vera: Agent, chat: ChatServer) -> None:
    first = json.dumps({"summary": "One"})
    second = json.dumps({"summary": "Two"})
    chat.script(tool_calls(("c1", "leave_request", first), ("c2", "leave_request", second)), text("Done."))

    visitor_answer(agent=chat_vera, text="Pass these on.", caller="c")

    assert list(IntakeRequest.across_tenants.values_list("summary", flat=True)) == ["One"]
    assert chat.requests[1].body["messages"][-1]["content"] == (
        "The visitor's request was already taken in during this turn; nothing more was recorded."
    )


@pytest.mark.django_db
def test_a_model_that_only_calls_tools_ends_with_the_receipt(chat_vera: Agent, chat: ChatServer) -> None:
    call = json.dumps({"summary": "Logo quote"})
    chat.script(*(tool_calls((f"c{n}", "leave_request", call)) for n in range(MAX_ROUNDS)))

    reply = visitor_answer(agent=chat_vera, text="Pass this on.", caller="c")

    assert reply.text == TAKEN_IN
    assert len(chat.requests) == MAX_ROUNDS
    assert IntakeRequest.across_tenants.count() == 1


# --- The dashboard and the admin ------------------------------------------------------------------


def leave(agent: Agent, summary: str) -> IntakeRequest:
    return intake_capture(agent=agent, caller="c", summary=summary, details="")


@pytest.fixture
def ines(tenant: Tenant) -> AbstractUser:
    user = make_user("ines")
    Membership.objects.create(user=user, tenant=tenant, role=Membership.Role.VIEWER)
    return user


@pytest.fixture
def bruno_agent(tenant: Tenant, ines: AbstractUser) -> Agent:
    """A second agent of the tenant whose requests go to Ines."""
    return Agent.objects.create(tenant=tenant, slug="bruno", name="Bruno", intake_owner=ines)


@pytest.mark.django_db
def test_the_intake_owner_sees_the_requests_addressed_to_them(
    client: Client, vera: Agent, bruno_agent: Agent, principal: AbstractUser
) -> None:
    leave(vera, "For Tomas")
    leave(bruno_agent, "For Ines")
    client.force_login(principal)

    response = client.get("/t/acme/intake/")

    assert response.status_code == 200
    assert [r.summary for r in response.context["intake_requests"]] == ["For Tomas"]
    assert response.context["unconfigured"] == []


@pytest.mark.django_db
def test_operators_see_every_request_and_which_agents_cannot_take_them(
    client: Client, vera: Agent, bruno_agent: Agent, operator: AbstractUser
) -> None:
    leave(vera, "For Tomas")
    leave(bruno_agent, "For Ines")
    unconfigured = Agent.objects.create(tenant=vera.tenant, slug="nobody", name="Nobody's agent")
    GroundingDocument.objects.create(tenant=vera.tenant, agent=unconfigured, title="About", text="Hello.")
    client.force_login(operator)

    response = client.get("/t/acme/intake/")

    assert response.status_code == 200
    assert [r.summary for r in response.context["intake_requests"]] == ["For Ines", "For Tomas"]
    assert response.context["unconfigured"] == [unconfigured]
    assert "Nobody&#x27;s agent (nobody)" in response.content.decode()
    fragment = client.get("/t/acme/intake/?fragment=1").content.decode()
    assert fragment.startswith('<section data-live="intake"')


@pytest.mark.django_db
def test_others_of_the_tenant_are_forbidden(client: Client, vera: Agent, tenant: Tenant) -> None:
    leave(vera, "For Tomas")
    viewer = make_user("vic")
    Membership.objects.create(user=viewer, tenant=tenant, role=Membership.Role.VIEWER)
    client.force_login(viewer)

    assert client.get("/t/acme/intake/").status_code == 403


@pytest.mark.django_db
def test_another_tenant_is_not_found(client: Client, vera: Agent, other_tenant: Tenant) -> None:
    leave(vera, "For Tomas")
    outsider = make_user("olaf")
    Membership.objects.create(user=outsider, tenant=other_tenant, role=Membership.Role.OWNER)
    client.force_login(outsider)

    assert client.get("/t/acme/intake/").status_code == 404
    assert client.get("/t/globex/intake/").status_code == 200
    assert list(client.get("/t/globex/intake/").context["intake_requests"]) == []
    assert IntakeRequest.across_tenants.count() == 1


@pytest.mark.django_db
def test_grounding_documents_are_managed_in_the_admin(client: Client, vera: Agent) -> None:
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw"))
    leave(vera, "For Tomas")

    response = client.post(
        "/admin/representative/groundingdocument/add/",
        {"agent": vera.pk, "title": "Parking", "text": "Parking is free."},
    )

    assert response.status_code == 302
    document = GroundingDocument.across_tenants.get(title="Parking")
    assert (document.tenant_id, document.agent_id) == (vera.tenant_id, vera.pk)
    assert client.get("/admin/representative/groundingdocument/").status_code == 200
    assert client.get("/admin/representative/intakerequest/").status_code == 200
    assert client.get("/admin/representative/intakerequest/add/").status_code == 403
