"""The negotiate skill on our AgentCard lists the agent's own vocabulary and the terms it declares, as
a2a-sdk's resolver reads it (in words; our negotiation extension says the same as data, test_move_rules)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.types import AgentCard

from agents.models import Agent

pytestmark = pytest.mark.django_db(transaction=True)

PREFIX = "Negotiates on its party's behalf over A2A message/send. Understands: "


def card_of(url: str) -> AgentCard:
    async def fetch() -> AgentCard:
        async with httpx.AsyncClient(timeout=30) as http:
            return await A2ACardResolver(http, url).get_agent_card()

    return asyncio.run(fetch())


def test_the_default_vocabulary_is_listed_with_descriptions(seller_url: str) -> None:
    [skill] = card_of(seller_url).skills

    assert skill.id == "negotiate"
    assert skill.description == PREFIX + (
        "propose (put an offer on the table), counter (answer an offer with another), "
        "accept (accept an offer on the table), reject (end without a deal). "
        "Terms: amount (number, EUR per day), currency."
    )


def test_a_custom_vocabulary_is_listed_exactly(seller_url: str, seller: Agent) -> None:
    seller.allowed_actions = [
        {
            "name": "introduce",
            "description": "introduce them to the VP of Engineering",
            "terminal": True,
            "state": "completed",
        },
        {
            "name": "refer",
            "description": "refer them to the startup programme",
            "terminal": True,
            "state": "rejected",
        },
        {"name": "decline", "description": "", "terminal": True, "state": "rejected"},
    ]
    seller.save()

    [skill] = card_of(seller_url).skills

    assert skill.description == PREFIX + (
        "introduce (introduce them to the VP of Engineering), "
        "refer (refer them to the startup programme), decline. "
        "Terms: amount (number, EUR per day), currency."
    )


@pytest.mark.parametrize(
    ("terms", "sentence"),
    [
        (
            "start (date), rate (integer, GBP per hour), remote",
            " Terms: start (date), rate (integer, GBP per hour), remote.",
        ),
        # Prose and terms off declare nothing.
        ("the day rate, in euros", ""),
        ("", ""),
    ],
)
def test_the_declared_terms_are_listed(seller_url: str, seller: Agent, terms: str, sentence: str) -> None:
    seller.terms = terms
    seller.save()

    [skill] = card_of(seller_url).skills

    assert skill.description.endswith(f"reject (end without a deal).{sentence}")
