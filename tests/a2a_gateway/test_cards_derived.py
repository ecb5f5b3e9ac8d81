"""The card derived from the agent: its party as our extension, its skills, its security scheme, and the
operator's overrides — as a2a-sdk's resolver reads them off the live stack, and refused at save time
when they would not make a card."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import AgentCard, AgentExtension
from django.conf import settings
from django.core.exceptions import ValidationError
from google.protobuf.json_format import MessageToDict

from a2a_gateway.cards import agent_card, check_overrides, derived_card
from agents.models import Agent, Tool
from negotiations import receipts
from negotiations.rules import NEGOTIATION_EXTENSION
from tests.a2a_gateway.conftest import Endpoint, run

SKILL = {"id": "intro", "name": "Introductions", "description": "Introduces founders.", "tags": ["intro"]}


def nested(levels: int) -> dict[str, Any]:
    """``{"a": {"a": … {}}}``, ``levels`` dicts deep."""
    return {} if levels == 1 else {"a": nested(levels - 1)}


def skills_of(card: AgentCard) -> list[tuple[str, str, list[str]]]:
    return [(s.id, s.description, list(s.tags)) for s in card.skills]


@pytest.mark.django_db(transaction=True)
def test_the_party_is_published_as_our_extension(seller_endpoint: Endpoint, seller: Agent) -> None:
    seller.party_id = "did:web:idris.example"
    seller.save()

    card = seller_endpoint.card()

    [extension, negotiation] = card.capabilities.extensions
    assert negotiation.uri == NEGOTIATION_EXTENSION
    assert extension.uri == receipts.PARTY_EXTENSION == "https://parley.dev/ext/party/v1"
    assert not extension.required
    assert MessageToDict(extension.params) == {"partyId": "did:web:idris.example"}


@pytest.mark.django_db(transaction=True)
def test_an_agent_without_a_party_id_publishes_no_party_extension(seller_endpoint: Endpoint) -> None:
    assert [e.uri for e in seller_endpoint.card().capabilities.extensions] == [NEGOTIATION_EXTENSION]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("inbound_auth", "schemes", "json_schemes"),
    [
        ("anonymous", {}, None),
        (
            "api_key",
            {"apiKey": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}}},
            {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}},
        ),
        (
            "bearer",
            {"bearer": {"httpAuthSecurityScheme": {"scheme": "bearer"}}},
            {"bearer": {"type": "http", "scheme": "bearer"}},
        ),
    ],
)
def test_the_card_declares_the_inbound_auth_scheme(
    seller_endpoint: Endpoint,
    seller: Agent,
    inbound_auth: str,
    schemes: dict[str, Any],
    json_schemes: dict[str, Any] | None,
) -> None:
    seller.inbound_auth = inbound_auth
    seller.save()

    card = seller_endpoint.card()
    body = run(lambda http: http.get(seller_endpoint.card_url)).json()

    declared = {
        name: {
            kind: {k: v for k, v in fields.items() if k != "description"} for kind, fields in scheme.items()
        }
        for name, scheme in MessageToDict(card).get("securitySchemes", {}).items()
    }
    assert declared == schemes
    assert [MessageToDict(r) for r in card.security_requirements] == [
        {"schemes": {name: {}}} for name in schemes
    ]
    # The v0.3 shape beside it, as 0.3 clients read it.
    if json_schemes is None:
        assert "securitySchemes" not in body
        assert "security" not in body
    else:
        [(name, expected)] = json_schemes.items()
        assert expected.items() <= body["securitySchemes"][name].items()
        assert body["security"] == [{name: []}]


@pytest.mark.django_db
def test_tools_are_skills_only_when_published(agent: Agent) -> None:
    own = Tool.objects.create(
        tenant=agent.tenant,
        name="book_call",
        description="Book a call with Tomas.",
        kind=Tool.Kind.HOST,
        url="https://host.example/book",
        secret="s",
    )
    ask = Tool.objects.create(tenant=agent.tenant, name="ask_user", description="", kind=Tool.Kind.BUILTIN)
    agent.tools.add(own, ask)

    assert [s.id for s in agent_card(agent).skills] == ["negotiate"]

    agent.publish_tools = True
    # The platform's own tools (asking the party) are never listed.
    assert skills_of(agent_card(agent))[1:] == [("book_call", "Book a call with Tomas.", ["tool"])]


@pytest.mark.django_db
def test_the_default_tools_are_never_skills(agent: Agent) -> None:
    agent.publish_tools = True

    assert [s.id for s in agent_card(agent).skills] == ["negotiate"]


@pytest.mark.django_db
def test_card_skills_replace_the_derived_skills(agent: Agent) -> None:
    agent.publish_tools = True
    agent.card_skills = [SKILL, {**SKILL, "id": "refer", "examples": ["Refer me."]}]

    check_overrides(agent)
    card = agent_card(agent)

    assert [MessageToDict(s) for s in card.skills] == [
        SKILL,
        {**SKILL, "id": "refer", "examples": ["Refer me."]},
    ]


@pytest.mark.django_db
def test_card_fields_are_merged_last_and_deeply(agent: Agent) -> None:
    agent.card_skills = [SKILL]
    agent.card_fields = {
        "iconUrl": "https://acme.example/tomas.png",
        "provider": {"organization": "Acme Robotics GmbH"},
        "skills": [{**SKILL, "name": "Intros"}],
    }

    check_overrides(agent)
    card = agent_card(agent)

    assert card.icon_url == "https://acme.example/tomas.png"
    # A dict merges: the provider keeps its derived URL.
    assert (card.provider.organization, card.provider.url) == ("Acme Robotics GmbH", settings.PUBLIC_BASE_URL)
    # A list replaces, after card_skills.
    assert [s.name for s in card.skills] == ["Intros"]
    assert card.name == "Tomas's agent"


@pytest.mark.django_db(transaction=True)
def test_overrides_are_served(seller_endpoint: Endpoint, seller: Agent) -> None:
    seller.card_skills = [SKILL]
    seller.card_fields = {"documentationUrl": "https://globex.example/idris"}
    seller.save()

    card = seller_endpoint.card()

    assert card.documentation_url == "https://globex.example/idris"
    assert skills_of(card) == [("intro", "Introduces founders.", ["intro"])]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("card_fields", {"nmae": "Tomas"}, 'has no field named "nmae"'),
        ("card_fields", {"name": ""}, "The card needs these fields: name."),
        ("card_fields", {"skills": []}, "The card needs these fields: skills."),
        (
            "card_fields",
            {"supportedInterfaces": [{"url": "https://x.example"}]},
            "The interfaces follow the agent's URL and host name.",
        ),
        ("card_fields", {"url": "https://elsewhere.example"}, 'has no field named "url"'),
        ("card_fields", {"signatures": []}, "Signatures are made by the platform, not set."),
        ("card_fields", {"securitySchemes": {}}, "The security schemes follow the inbound auth setting."),
        ("card_fields", {"capabilities": {"streaming": "yes"}}, "Not a valid AgentCard"),
        ("card_fields", ["name"], "Give the card fields as a JSON object."),
        ("card_fields", {"provider": nested(12)}, "Nest no deeper than 12 levels."),
        ("card_skills", [{"id": "intro"}], "skills[0].name, skills[0].description, skills[0].tags"),
        ("card_skills", [SKILL, SKILL], "Give every skill its own id."),
        ("card_skills", [{**SKILL, "tag": ["x"]}], 'has no field named "tag"'),
        ("card_skills", {"id": "intro"}, "List AgentSkill objects."),
    ],
)
def test_an_override_that_makes_no_card_is_refused(
    agent: Agent, field: str, value: Any, message: str
) -> None:
    setattr(agent, field, value)

    with pytest.raises(ValidationError) as raised:
        check_overrides(agent)

    [(key, [error])] = raised.value.message_dict.items()
    assert key == field
    assert message in error


@pytest.mark.django_db(transaction=True)
def test_an_invalid_stored_override_is_left_out_of_the_served_card(
    seller_endpoint: Endpoint, seller: Agent
) -> None:
    """Saved before it was checked: the agent keeps its derived card rather than losing it."""
    seller.card_fields = {"nmae": "Idris"}
    seller.card_skills = [SKILL]
    seller.save()

    card = seller_endpoint.card()

    assert card.name == "Idris Haddad"
    assert [s.id for s in card.skills] == ["negotiate"]


@pytest.mark.django_db
def test_an_agent_that_answers_visitors_says_so_on_its_card(vera: Agent, agent: Agent) -> None:
    """The ``ask`` skill is there when the representative face is on (grounding or an intake
    owner), and only then."""
    [negotiate, ask] = agent_card(vera).skills

    assert (negotiate.id, ask.id, ask.name) == ("negotiate", "ask", "Ask about Vera Studio")
    assert 'Start a message with "Request:"' in ask.description
    assert (list(ask.input_modes), list(ask.output_modes)) == (["text/plain"], ["text/plain"])
    assert [s.id for s in agent_card(agent).skills] == ["negotiate"]


@pytest.mark.django_db
def test_the_negotiation_extension_stays_as_derived_whatever_the_overrides_say(agent: Agent) -> None:
    """The gateway holds moves to the agent's own rules, so its card cannot publish others; an
    operator's own extensions (a list replaces) still come through."""
    agent.party_id = ""
    agent.card_fields = {
        "capabilities": {
            "extensions": [
                {"uri": NEGOTIATION_EXTENSION, "params": {"actions": [{"name": "anything"}]}},
                {"uri": "https://ext.example/v1"},
            ]
        }
    }

    check_overrides(agent)
    card = agent_card(agent)

    [derived] = derived_card(agent).capabilities.extensions
    assert derived.uri == NEGOTIATION_EXTENSION
    assert list(card.capabilities.extensions) == [AgentExtension(uri="https://ext.example/v1"), derived]
