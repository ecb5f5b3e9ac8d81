"""The AgentCard of each agent, derived from the agent (docs/wire-format.md#cards).

What a card says, in order of derivation:

* identity — name, description, version, the tenant as provider; the party the
  agent acts for as our extension :data:`negotiations.receipts.PARTY_EXTENSION`, ``params``
  ``{"partyId": agent.party_id}`` (left out when the agent names no party);
* what it takes — ``application/json`` (a move is one data part), and
  ``text/plain`` only where its representative face answers plain text
  (:func:`representative.selectors.face_on`); it answers in both (a move,
  or a text reply: the holding reply, the try-again text, a visitor's answer);
* how to negotiate with it — our extension
  :data:`negotiations.rules.NEGOTIATION_EXTENSION`: its vocabulary, the terms
  it declares (name, type, unit, currency) and the JSON Schema of a move's
  data part (docs/move-rules.md), the rules every inbound move is checked
  against; the ``negotiate`` skill says the same in words;
* where — one JSON-RPC URL, offered at A2A 1.0 and 0.3: the agent's URL under
  ``PUBLIC_BASE_URL``, or the root of its own host name when the card is
  served there (:func:`agents.addresses.endpoint_url`);
* settlements it signs — our extension
  :data:`negotiations.receipts.SETTLEMENT_EXTENSION`, ``params.jwks`` the key
  set its settlement signatures are checked against, when its tenant has a
  signing key (docs/settlement-signatures.md);
* who may call — the security scheme of ``agent.inbound_auth``
  (:data:`API_KEY_SCHEME`: header ``X-API-Key``; :data:`BEARER_SCHEME`: HTTP
  bearer), required by ``security_requirements``; none for anonymous agents;
* skills — ``negotiate`` with the agent's vocabulary, and, with
  ``publish_tools``, one skill per tool of its own;
* operator overrides, last: ``agent.card_skills`` replaces the skills,
  ``agent.card_fields`` is deep-merged over the card's JSON (:func:`with_overrides`).

The same agent gives the same bytes every time (an intent never changes its
card). A tenant with an active signing key gets its cards signed
(:func:`card_document`, :mod:`a2a_gateway.signing`).
"""

from __future__ import annotations

import logging
import re
from typing import Any, TypeVar
from urllib.parse import urlsplit

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    APIKeySecurityScheme,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.errors import InvalidParamsError
from a2a.utils.proto_utils import validate_proto_required_fields
from django.conf import settings
from django.core.exceptions import ValidationError
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from google.protobuf.message import Message as ProtobufMessage
from google.protobuf.struct_pb2 import Struct

from a2a_gateway import signing
from agents import tools
from agents.addresses import endpoint_url
from agents.models import Agent
from exchange import wire
from exchange.models import ExchangeProfile
from exchange.services import profile_of
from negotiations import receipts
from negotiations.negotiator import move_rules
from negotiations.rules import NEGOTIATION_EXTENSION, extension_params
from negotiations.services.signatures import SigningMaterial
from parley.edge import API_KEY_HEADER
from representative.selectors import face_on

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=ProtobufMessage)
_CAMEL = re.compile(r"_([a-z])")

# A move is one data part (JSON); plain text is a visitor's question, where the representative takes it.
MOVE_MODE = "application/json"
TEXT_MODE = "text/plain"
MODES = [MOVE_MODE, TEXT_MODE]

API_KEY_SCHEME = "apiKey"
BEARER_SCHEME = "bearer"
_SCHEMES: dict[str, tuple[str, SecurityScheme]] = {
    Agent.InboundAuth.API_KEY: (
        API_KEY_SCHEME,
        SecurityScheme(
            api_key_security_scheme=APIKeySecurityScheme(
                location="header", name=API_KEY_HEADER, description="An API key the agent's operator issued."
            )
        ),
    ),
    Agent.InboundAuth.BEARER: (
        BEARER_SCHEME,
        SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(
                scheme="bearer", description="A token the agent's operator issued."
            )
        ),
    ),
}

# Nesting an override may reach. Far below the canonicalizer's own limit (a2a-sdk: 128), which a
# signed card must stay under; no card field needs more.
MAX_OVERRIDE_DEPTH = 12


def jwks_url(endpoint: str) -> str:
    """The key set beside a card's endpoint (``<endpoint>/.well-known/jwks.json``)."""
    return f"{endpoint.rstrip('/')}{signing.JWKS_PATH}"


def card_document(agent: Agent, *, host_name: str | None = None) -> dict[str, Any]:
    """The card's JSON as served, with the v0.3 fields; signed when the tenant has an active key.

    Queries the database (the agent's tools when it publishes them, the
    tenant's signing key): call it from async code through ``sync_to_async``.
    """
    card = agent_card(agent, host_name=host_name)
    key = signing.active_signing_key(agent.tenant_id)
    if key is not None:
        card = signing.sign_card(card, key, jku=jwks_url(endpoint_url(agent, host_name=host_name)))
    document = agent_card_to_dict(card)
    # Extension params are protobuf Structs, whose keys come out in an order that differs from one
    # process to the next: sorted, every web process serves the same bytes.
    for extension in document.get("capabilities", {}).get("extensions", []):
        if "params" in extension:
            extension["params"] = _sorted_keys(extension["params"])
    return document


def _sorted_keys(value: Any) -> Any:
    """``value`` (JSON) with the keys of every object in it sorted."""
    if isinstance(value, dict):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


def agent_card(agent: Agent, *, host_name: str | None = None) -> AgentCard:
    """The card counterparties fetch (unsigned): :func:`derived_card` with the operator's overrides.

    An override that no longer makes a valid card (saved before it was
    checked, or broken by a change to the derived card) is logged and left
    out, so the agent keeps a card.
    """
    card = derived_card(agent, host_name=host_name)
    try:
        return with_overrides(card, agent)
    except ValidationError as exc:
        logger.warning("card overrides of agent %s left out: %s", agent.pk, exc.messages)
        return card


def derived_card(agent: Agent, *, host_name: str | None = None) -> AgentCard:
    """The card as the agent's own fields give it, before any operator override."""
    url = endpoint_url(agent, host_name=host_name)
    card = AgentCard(
        name=agent.name,
        description=agent.description or f"Negotiates on behalf of {agent.name}.",
        version=agent.version,
        provider=AgentProvider(organization=agent.tenant.name, url=settings.PUBLIC_BASE_URL),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=input_modes(agent),
        default_output_modes=MODES,
        skills=derived_skills(agent),
    )
    if agent.party_id:
        card.capabilities.extensions.append(party_extension(agent))
    card.capabilities.extensions.append(negotiation_extension(agent))
    profile = profile_of(agent)
    if profile is not None:
        card.capabilities.extensions.append(exchange_extension(url, profile))
    if signing.active_signing_key(agent.tenant_id) is not None:
        card.capabilities.extensions.append(settlement_extension(agent))
    if (declared := _SCHEMES.get(agent.inbound_auth)) is not None:
        name, scheme = declared
        card.security_schemes[name].CopyFrom(scheme)
        card.security_requirements.append(SecurityRequirement(schemes={name: StringList()}))
    return card


def input_modes(agent: Agent) -> list[str]:
    """What ``agent`` takes: moves as JSON, and plain text only where its representative face
    answers it (:func:`a2a_gateway.routing.takes`); to any other agent plain text is no move,
    and refused."""
    return MODES if face_on(agent) else [MOVE_MODE]


def negotiation_extension(agent: Agent) -> AgentExtension:
    """How to negotiate with ``agent``: ``params`` are :func:`negotiations.rules.extension_params`
    of its move rules (:func:`negotiations.negotiator.move_rules`) — ``actions``, ``terms`` and
    ``moveSchema`` — which every inbound move is checked against."""
    params = Struct()
    params.update(extension_params(move_rules(agent)))
    return AgentExtension(
        uri=NEGOTIATION_EXTENSION,
        description=(
            "Negotiation moves: params.actions is this agent's vocabulary, params.terms the terms it "
            "declares (name, type, unit, currency), params.moveSchema the JSON Schema of a move's data "
            "part. Moves outside them are refused with -32602."
        ),
        required=False,
        params=params,
    )


def settlement_extension(agent: Agent) -> AgentExtension:
    """That ``agent`` signs its agreed settlements (docs/settlement-signatures.md): ``params.jwks``
    is the key set under its URL, the same whichever host name serves the card, so that both sides
    name it alike in the settlement they sign; ``params.alg`` the algorithm."""
    params = Struct()
    params.update({"jwks": jwks_url(endpoint_url(agent)), "alg": signing.ALGORITHM})
    return AgentExtension(
        uri=receipts.SETTLEMENT_EXTENSION,
        description=(
            "Signed settlements: an agreed settlement is signed by both sides (ES256 JWS over its RFC 8785 "
            "form), each signature in the metadata of its side's closing message; params.jwks is this "
            "agent's key set."
        ),
        required=False,
        params=params,
    )


def settlement_key(agent: Agent) -> SigningMaterial | None:
    """What ``agent``'s settlements are signed with: its tenant's active key and the key set its
    card names (:func:`settlement_extension`); None when the tenant has no key."""
    key = signing.active_signing_key(agent.tenant_id)
    if key is None:
        return None
    return SigningMaterial(kid=key.kid, private_pem=key.private_pem, jwks=jwks_url(endpoint_url(agent)))


def party_extension(agent: Agent) -> AgentExtension:
    """Who the agent acts for: ``params.partyId`` is the party's DID, profile URL or account id."""
    params = Struct()
    params.update({"partyId": agent.party_id})
    return AgentExtension(
        uri=receipts.PARTY_EXTENSION,
        description="The party this agent acts for: params.partyId is its DID, profile URL or account id.",
        required=False,
        params=params,
    )


def exchange_extension(url: str, profile: ExchangeProfile) -> AgentExtension:
    """Agent Exchange (docs/agent-exchange.md): required on an agent dedicated to it, optional on a
    shared one; ``params.preparation`` names the same-origin endpoint that takes complete requests."""
    params = Struct()
    params.update(
        {
            "preparation": {
                "endpoint": f"{url.rstrip('/')}{wire.PREPARATION_PATH}",
                "mediaType": wire.PREPARATION_MEDIA_TYPE,
                "method": "POST",
            }
        }
    )
    return AgentExtension(
        uri=wire.EXTENSION_URI,
        description=(
            "Agent Exchange: delegated requests prepared out of A2A and referred to by their digest; "
            "the result is a redacted receipt."
        ),
        required=profile.mode == ExchangeProfile.Mode.REQUIRED,
        params=params,
    )


def derived_skills(agent: Agent) -> list[AgentSkill]:
    """``negotiate``; ``ask`` when the agent answers visitors (:func:`representative.selectors.face_on`);
    then (with ``publish_tools``) the agent's own tools by name, in offer order.

    The platform's default tools (``ask_user``, ``negotiate``, ``answer``) are
    the agent's dealings with its own party and the negotiate skill itself,
    so they are never listed as tools.
    """
    skills = [
        AgentSkill(
            id="negotiate",
            name="Negotiate",
            description=(
                f"Negotiates on its party's behalf over A2A message/send. Understands: {vocabulary(agent)}."
                + terms_sentence(agent)
            ),
            tags=["negotiation"],
            input_modes=[MOVE_MODE],
            # A text reply too: the holding reply while its party is consulted, the try-again text.
            output_modes=MODES,
        )
    ]
    if face_on(agent):
        skills.append(
            AgentSkill(
                id="ask",
                name=f"Ask about {agent.name}",
                description=(
                    f"Answers questions about {agent.name} from its published documents, in plain text. "
                    'Start a message with "Request:" to leave a request for its team.'
                ),
                tags=["questions"],
                input_modes=["text/plain"],
                output_modes=["text/plain"],
            )
        )
    if agent.publish_tools:
        skills += [
            AgentSkill(id=name, name=name, description=tool.spec.description or name, tags=["tool"])
            for name, tool in tools.tools_for(agent).items()
            if name not in tools.DEFAULT_TOOLS
        ]
    return skills


def vocabulary(agent: Agent) -> str:
    """The actions the agent uses, each ``name (description)`` or the bare name when it has none:
    "propose (put an offer on the table), counter (answer an offer with another), …"."""
    return ", ".join(
        f"{a['name']} ({a['description']})" if a.get("description") else a["name"]
        for a in agent.allowed_actions
    )


def terms_sentence(agent: Agent) -> str:
    """ " Terms: amount (number, EUR per day), currency." — the terms ``agent`` declares, each with
    its type and unit as declared; "" when it declares none (terms off, or a prose description)."""
    declared = move_rules(agent).terms
    if not declared:
        return ""
    fields = [
        t.name + (f" ({', '.join(d for d in (t.type, t.unit) if d)})" if t.type or t.unit else "")
        for t in declared
    ]
    return f" Terms: {', '.join(fields)}."


def with_overrides(card: AgentCard, agent: Agent) -> AgentCard:
    """``card`` with the operator's overrides: ``card_skills`` (AgentSkill JSON objects, camelCase
    as on the wire) replace its skills, then ``card_fields`` is merged over its A2A 1.0 JSON,
    dicts deeply, anything else (lists included) replaced.

    Raises ``ValidationError`` keyed by the field at fault when an override is
    not JSON of the right shape, names a field AgentCard does not have (the
    v0.3 fields ``url``, ``preferredTransport``, ``protocolVersion`` and
    ``security`` are derived from the 1.0 ones), sets ``signatures`` or the
    security schemes (they follow ``inbound_auth``), changes the interfaces or
    the party extension, nests deeper than :data:`MAX_OVERRIDE_DEPTH`, leaves a
    required field empty, or makes a link of the card (:func:`_check_links`)
    anything but an http(s) URL. The negotiation and settlement extensions stay
    as derived whatever ``card_fields`` says of them.
    """
    if agent.card_skills:
        if not isinstance(agent.card_skills, list):
            raise ValidationError({"card_skills": "List AgentSkill objects."})
        _check_depth("card_skills", agent.card_skills)
        skills = [_parse("card_skills", skill, AgentSkill()) for skill in agent.card_skills]
        ids = [skill.id for skill in skills]
        if len(set(ids)) != len(ids):
            raise ValidationError({"card_skills": "Give every skill its own id."})
        card = _copy(card)
        del card.skills[:]
        card.skills.extend(skills)
    if agent.card_fields:
        if not isinstance(agent.card_fields, dict):
            raise ValidationError({"card_fields": "Give the card fields as a JSON object."})
        if "signatures" in agent.card_fields:
            raise ValidationError({"card_fields": "Signatures are made by the platform, not set."})
        if {"securitySchemes", "securityRequirements"} & agent.card_fields.keys():
            # The edge enforces inbound_auth: a card declaring anything else would misdirect callers.
            raise ValidationError({"card_fields": "The security schemes follow the inbound auth setting."})
        _check_depth("card_fields", agent.card_fields)
        derived = card
        card = _parse("card_fields", _merge(MessageToDict(card), agent.card_fields), AgentCard())
        # Where the agent answers and whom it acts for are the platform's to say, as the
        # signatures are: an override could send counterparties' moves elsewhere, or claim a party.
        if list(card.supported_interfaces) != list(derived.supported_interfaces):
            raise ValidationError({"card_fields": "The interfaces follow the agent's URL and host name."})
        if _party(card) != _party(derived):
            raise ValidationError({"card_fields": "The party extension follows the agent's party id."})
        _check_links(card)
        # The negotiation extension is put back as derived: the gateway checks moves against the
        # agent's own rules, whatever a card would say, and an override listing extensions of its
        # own (a list replaces) need not copy it.
        # So is the settlement extension: the key set it names is the platform's to say.
        platform = (NEGOTIATION_EXTENSION, receipts.SETTLEMENT_EXTENSION)
        extensions = [e for e in card.capabilities.extensions if e.uri not in platform]
        del card.capabilities.extensions[:]
        card.capabilities.extensions.extend(
            [*extensions, *(e for uri in platform for e in _ours(derived, uri))]
        )
    try:
        validate_proto_required_fields(card)
    except InvalidParamsError as exc:
        # The SDK names proto fields; the operator wrote JSON names.
        missing = ", ".join(
            _CAMEL.sub(lambda m: m[1].upper(), error["field"]) for error in (exc.data or {}).get("errors", [])
        )
        field = "card_fields" if agent.card_fields else "card_skills"
        raise ValidationError({field: f"The card needs these fields: {missing}."}) from exc
    return card


def _check_links(card: AgentCard) -> None:
    """Refuse a link of ``card`` that is not an http(s) URL: ``documentationUrl``, ``iconUrl``,
    ``provider.url`` and the extensions' ``uri``. Counterparties' tools show and follow them, so a
    ``javascript:`` or ``data:`` link would run in whoever opens it."""
    links = {
        "documentationUrl": card.documentation_url,
        "iconUrl": card.icon_url,
        "provider.url": card.provider.url,
        **{
            f"capabilities.extensions[{index}].uri": extension.uri
            for index, extension in enumerate(card.capabilities.extensions)
        },
    }
    for where, link in links.items():
        if link and not _is_web_url(link):
            shown = link if len(link) <= 80 else f"{link[:80]}…"
            raise ValidationError({"card_fields": f"{where}: give an http or https URL, not {shown!r}."})


def _is_web_url(link: str) -> bool:
    try:
        parts = urlsplit(link)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and link.isprintable()


def _party(card: AgentCard) -> list[AgentExtension]:
    return _ours(card, receipts.PARTY_EXTENSION)


def _ours(card: AgentCard, uri: str) -> list[AgentExtension]:
    return [e for e in card.capabilities.extensions if e.uri == uri]


def check_overrides(agent: Agent) -> None:
    """Refuse, at save time, card overrides that would not make a valid AgentCard.

    For :func:`agents.configuration.full_clean`: needs ``agent.tenant``. Raises ``ValidationError``
    keyed ``card_skills`` or ``card_fields`` (see :func:`with_overrides`).
    """
    with_overrides(derived_card(agent), agent)


def _copy(card: AgentCard) -> AgentCard:
    copied = AgentCard()
    copied.CopyFrom(card)
    return copied


def _parse(field: str, data: Any, message: M) -> M:
    """``data`` parsed strictly (unknown fields refused) into ``message``; ``ValidationError`` if not."""
    try:
        return ParseDict(data, message)
    except (ParseError, TypeError, ValueError) as exc:
        raise ValidationError({field: f"Not a valid {type(message).__name__}: {exc}"}) from exc


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: a dict over a dict merges, anything else replaces."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _check_depth(field: str, value: Any, depth: int = 1) -> None:
    if depth > MAX_OVERRIDE_DEPTH:
        raise ValidationError({field: f"Nest no deeper than {MAX_OVERRIDE_DEPTH} levels."})
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        _check_depth(field, child, depth + 1)


def capability_card() -> AgentCard:
    """The union of what any agent supports; it gates operations for the shared request handler."""
    return AgentCard(
        name="Parley agents",
        description="Capabilities shared by every Parley agent endpoint.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=settings.PUBLIC_BASE_URL, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=[
            AgentSkill(id="negotiate", name="Negotiate", description="Negotiates.", tags=["negotiation"])
        ],
    )
