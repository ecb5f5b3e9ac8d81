"""Proof of an agent's host name (agents.services.host_names), and the dashboard's Verify now.

The host is played by real servers on loopback: a name server on UDP answering the TXT query
(:class:`tests.loopback.NameServer`, which ``HOST_NAME_DNS_SERVERS`` names, as Pebble's -dnsserver)
and an HTTP server serving the token (:class:`tests.loopback.PageServer`, on the port
``HOST_NAME_HTTP_PORT`` names, as Pebble's httpPort). Only the system resolver is replaced, to give
the host name the loopback address (``resolve_to``).
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from starlette.responses import PlainTextResponse, RedirectResponse

from agents import configuration
from agents.models import Agent
from agents.services import host_names
from parley.models import Membership, Tenant
from tests.agents.pages import member
from tests.loopback import NameServer, PageServer, SilentServer

HOST = "vera.example.com"


@pytest.fixture
def web(host_web: PageServer, resolve_to: dict[str, list[str]]) -> PageServer:
    """What answers the host over HTTP now."""
    resolve_to[HOST] = ["127.0.0.1"]
    return host_web


@pytest.fixture
def claimed(agent: Agent, name_server: NameServer, web: PageServer) -> Agent:
    return configuration.agent_update(agent=agent, values={"host_name": HOST})


def proof(agent: Agent) -> host_names.Challenge:
    challenge = host_names.challenge(agent)
    assert challenge is not None
    return challenge


def token_path(agent: Agent) -> str:
    return f"/.well-known/parley-verification/{agent.host_name_token}"


def problems(agent: Agent) -> list[str]:
    """What verifying ``agent`` now says is wrong; that it stayed unproved."""
    with pytest.raises(ValidationError) as refused:
        host_names.verify(agent=agent)
    agent.refresh_from_db()
    assert agent.host_name_verified_at is None
    return refused.value.message_dict["host_name"]


def test_a_claim_gets_a_token_of_its_own_and_serves_nothing_yet(claimed: Agent, web: PageServer) -> None:
    token = claimed.host_name_token

    assert len(token) == 43
    assert claimed.host_name_verified_at is None
    assert proof(claimed) == host_names.Challenge(
        host_name=HOST,
        dns_name=f"_parley-challenge.{HOST}",
        value=f"parley-verification={token}",
        http_url=f"http://{HOST}:{web.port}/.well-known/parley-verification/{token}",
    )


def test_the_http_token_proves_the_host_name(claimed: Agent, web: PageServer) -> None:
    web.pages[token_path(claimed)] = PlainTextResponse(f"{proof(claimed).value}\n")

    host_names.verify(agent=claimed)

    claimed.refresh_from_db()
    assert claimed.host_name_verified_at is not None


def test_a_redirect_to_the_token_is_followed(claimed: Agent, web: PageServer) -> None:
    web.pages[token_path(claimed)] = RedirectResponse("/tokens/current")
    web.pages["/tokens/current"] = PlainTextResponse(proof(claimed).value)

    assert host_names.verify(agent=claimed).host_name_verified_at is not None


@pytest.mark.parametrize(
    "record",
    [
        '"parley-verification={token}"',
        # A value over 255 bytes comes split into strings; any value may be.
        '"parley-verification=" "{token}"',
    ],
)
def test_a_txt_record_proves_the_host_name(claimed: Agent, name_server: NameServer, record: str) -> None:
    """The web server answers 404: the record alone proves it."""
    name_server.records[proof(claimed).dns_name] = [
        '"google-site-verification=abc"',
        record.format(token=claimed.host_name_token),
    ]

    assert host_names.verify(agent=claimed).host_name_verified_at is not None


def test_with_neither_proof_each_way_says_what_was_missing(claimed: Agent) -> None:
    wanted = proof(claimed)

    assert problems(claimed) == [
        f"DNS: no TXT record at {wanted.dns_name} (the name does not exist).",
        f"HTTP: {wanted.http_url} answered 404, not 200.",
    ]


def test_wrong_values_are_named(claimed: Agent, name_server: NameServer, web: PageServer) -> None:
    wanted = proof(claimed)
    name_server.records[wanted.dns_name] = ['"parley-verification=an-old-token"']
    web.pages[token_path(claimed)] = PlainTextResponse("<html>Welcome</html>")

    assert problems(claimed) == [
        f"DNS: the TXT record at {wanted.dns_name} holds 'parley-verification=an-old-token', "
        f"not {wanted.value!r}.",
        f"HTTP: {wanted.http_url} answered 200, but its body is not {wanted.value!r}.",
    ]


def test_a_name_without_txt_records_and_an_error_status(
    claimed: Agent, name_server: NameServer, web: PageServer
) -> None:
    wanted = proof(claimed)
    name_server.records[wanted.dns_name] = []
    web.pages[token_path(claimed)] = PlainTextResponse(wanted.value, status_code=503)

    assert problems(claimed) == [
        f"DNS: no TXT record at {wanted.dns_name}.",
        f"HTTP: {wanted.http_url} answered 503, not 200.",
    ]


def test_no_answer_in_time(claimed: Agent, name_server: NameServer, settings: Any) -> None:
    settings.HOST_NAME_CHECK_TIMEOUT = 0.5
    name_server.silent = True
    with SilentServer() as silent:
        settings.HOST_NAME_HTTP_PORT = silent.port
        wanted = proof(claimed)

        assert problems(claimed) == [
            f"DNS: no answer for {wanted.dns_name} within 0.5 s.",
            f"HTTP: {wanted.http_url} did not answer within 0.5 s.",
        ]


def test_the_token_is_fetched_from_public_addresses_only_outside_tests(
    claimed: Agent, web: PageServer, settings: Any
) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = False
    web.pages[token_path(claimed)] = PlainTextResponse(proof(claimed).value)

    assert problems(claimed)[1] == (
        f"HTTP: {proof(claimed).http_url} was not fetched: the host '{HOST}' resolves to a private "
        "address; Parley does not call private addresses."
    )


def test_an_agent_without_a_host_name_has_nothing_to_verify(agent: Agent) -> None:
    assert problems(agent) == ["The agent has no host name to verify."]


@pytest.fixture
def proved(claimed: Agent, web: PageServer) -> Agent:
    web.pages[token_path(claimed)] = PlainTextResponse(proof(claimed).value)
    return host_names.verify(agent=claimed)


def test_a_new_host_name_needs_a_new_proof(proved: Agent) -> None:
    changed = configuration.agent_update(agent=proved, values={"host_name": "vera.example.org"})

    changed.refresh_from_db()
    assert changed.host_name_verified_at is None
    assert changed.host_name_token not in ("", proved.host_name_token)


def test_no_host_name_leaves_no_token(proved: Agent) -> None:
    cleared = configuration.agent_update(agent=proved, values={"host_name": None})

    cleared.refresh_from_db()
    assert (cleared.host_name_token, cleared.host_name_verified_at) == ("", None)


def test_other_changes_keep_the_proof(proved: Agent) -> None:
    kept = configuration.agent_update(agent=proved, values={"description": "Buys robots.", "host_name": HOST})

    kept.refresh_from_db()
    assert (kept.host_name_token, kept.host_name_verified_at) == (
        proved.host_name_token,
        proved.host_name_verified_at,
    )


def test_claiming_a_name_first_keeps_no_one_from_it(
    agent: Agent, seller: Agent, name_server: NameServer, web: PageServer
) -> None:
    """Another tenant claims the host name first and cannot prove it; the owner still can, and then
    holds it alone."""
    squatter = configuration.agent_update(agent=seller, values={"host_name": HOST})
    owner = configuration.agent_update(agent=agent, values={"host_name": HOST})
    web.pages[token_path(owner)] = PlainTextResponse(proof(owner).value)
    # The squatter's value is there too: only one agent may hold a name proved.
    web.pages[token_path(squatter)] = PlainTextResponse(proof(squatter).value)

    assert host_names.verify(agent=owner).host_name_verified_at is not None
    assert problems(squatter) == ["Another agent already serves this host name."]
    with pytest.raises(ValidationError) as refused:
        configuration.agent_update(agent=squatter, values={"description": "Sells robots."})
    assert refused.value.message_dict == {"host_name": ["Another agent already serves this host name."]}


def test_a_subdomain_of_the_platforms_is_given_first_come_first_served(
    agent: Agent, seller: Agent, settings: Any
) -> None:
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, ".parley.example"]

    given = configuration.agent_update(agent=agent, values={"host_name": "tomas.parley.example"})

    given.refresh_from_db()
    assert given.host_name_verified_at is not None
    with pytest.raises(ValidationError) as refused:
        configuration.agent_update(agent=seller, values={"host_name": "tomas.parley.example"})
    assert refused.value.message_dict == {"host_name": ["Another agent already serves this host name."]}
    other = configuration.agent_update(agent=seller, values={"host_name": "tomas.parley.example.com"})
    assert other.host_name_verified_at is None


def test_host_names_set_before_proofs_existed_are_kept_proved(agent: Agent, seller: Agent) -> None:
    """The data migration: such a name already serves counterparties; upgrading keeps it on."""
    migration = importlib.import_module("agents.migrations.0012_host_name_proof")
    Agent.across_tenants.filter(pk=seller.pk).update(host_name="idris.example.com")

    migration.prove_existing(apps, None)

    rows = Agent.across_tenants.order_by("slug")
    [(_, token, verified_at), tomas] = rows.values_list("slug", "host_name_token", "host_name_verified_at")
    assert (len(token), verified_at is not None) == (43, True)
    assert tomas == ("tomas", "", None)


# --- The edit page ----------------------------------------------------------------------------------


def edit_url(agent: Agent, tenant: Tenant | None = None) -> str:
    return reverse("agents:agent-edit", kwargs={"tenant": (tenant or agent.tenant).slug, "pk": agent.pk})


def verify_url(agent: Agent, tenant: Tenant | None = None) -> str:
    return reverse(
        "agents:agent-host-name-verify", kwargs={"tenant": (tenant or agent.tenant).slug, "pk": agent.pk}
    )


@pytest.fixture
def operating(client: Client, operator: AbstractUser) -> Client:
    client.force_login(operator)
    return client


def test_the_edit_page_says_how_to_prove_the_host_name(operating: Client, claimed: Agent) -> None:
    wanted = proof(claimed)

    page = operating.get(edit_url(claimed)).content.decode()

    assert "Not proved yet: the host name serves nothing" in page
    assert f"<code>{wanted.dns_name}</code> with the value <code>{wanted.value}</code>" in page
    assert f"<code>{wanted.http_url}</code> answering 200" in page
    assert f'action="{verify_url(claimed)}"' in page


def test_verify_now_says_what_was_wrong_then_that_it_is_proved(
    operating: Client, claimed: Agent, web: PageServer
) -> None:
    wanted = proof(claimed)

    refused = operating.post(verify_url(claimed), follow=True)

    assert refused.redirect_chain == [(edit_url(claimed), 302)]
    shown = [str(m) for m in refused.context["messages"]]
    assert shown == [
        f"DNS: no TXT record at {wanted.dns_name} (the name does not exist).",
        f"HTTP: {wanted.http_url} answered 404, not 200.",
    ]

    web.pages[token_path(claimed)] = PlainTextResponse(wanted.value)
    proved = operating.post(verify_url(claimed), follow=True)

    assert [str(m) for m in proved.context["messages"]] == [
        f"{HOST} is proved: the agent is served there in seconds."
    ]
    assert "Proved on " in proved.content.decode()
    assert f"<code>{wanted.dns_name}</code>" not in proved.content.decode()


def test_another_tenants_agent_is_a_404(operating: Client, seller: Agent, tenant: Tenant) -> None:
    assert operating.post(verify_url(seller, tenant)).status_code == 404


@pytest.mark.parametrize("role", [Membership.Role.PRINCIPAL, Membership.Role.VIEWER])
def test_only_owners_and_operators_verify(client: Client, claimed: Agent, role: str) -> None:
    client.force_login(member(claimed.tenant, "val", role))

    assert client.post(verify_url(claimed)).status_code == 403
