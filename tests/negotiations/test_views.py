"""One negotiation's page: its header, every turn, the settlement, escaping, the fragment, tenancy."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from agents.models import Agent, Intent, ModelEndpoint
from negotiations import selectors
from negotiations.models import Negotiation, Settlement, Turn
from parley.models import Membership, Tenant
from tests.chat_server import ChatServer
from tests.conftest import on_chat_model
from tests.negotiating_policy import NegotiatingPolicy
from tests.negotiations.pages import FLOOR, detail_url, inbound, inbound_deal, outbound
from tests.parley.tenancy import member

pytestmark = pytest.mark.django_db


@pytest.fixture
def deal(agent: Agent, intent: Intent) -> Negotiation:
    """Tomas's agent sells above :data:`FLOOR`; an inbound negotiation it agreed, by the real service."""
    agent.term_guards = FLOOR
    agent.save()
    return inbound_deal(agent)


def page(client: Client, n: Negotiation, **query: str) -> str:
    response = client.get(detail_url(n), query)
    assert response.status_code == 200
    return response.content.decode()


class TestPage:
    def test_the_header_says_who_what_and_how_far(self, logged_in: Client, deal: Negotiation) -> None:
        deal.objective = "A CFO two days a week."
        deal.save()

        html = page(logged_in, deal)

        assert '<h1 id="negotiation-heading">Tomas&#x27;s agent ↔ unnamed counterparty</h1>' in html
        assert (
            f'<dt>Agent</dt><dd><a href="/t/acme/agents/{deal.agent_id}/">Tomas&#x27;s agent</a> · '
            f'<a href="/t/acme/negotiations/?agent={deal.agent_id}">its negotiations</a></dd>'
        ) in html
        assert (
            "<dt>Intent</dt><dd>Bring in a fractional CFO. · "
            f'<a href="/t/acme/negotiations/?intent={deal.intent_id}">negotiations under this intent</a></dd>'
        ) in html
        assert "<dt>Direction</dt><dd>Inbound (they contacted us)</dd>" in html
        assert '<dt>Status</dt><dd data-status="settled">Settled (Task completed)</dd>' in html
        assert "<dt>Task id</dt><dd><code>task-1</code></dd>" in html
        assert "<dt>Context id</dt><dd><code>ctx-task-1</code></dd>" in html
        assert "<dt>Turns</dt><dd>4 recorded; our moves 2 of at most 10</dd>" in html
        assert "<dt>Objective</dt><dd>A CFO two days a week.</dd>" in html

    def test_every_turn_in_order_with_its_move(self, logged_in: Client, deal: Negotiation) -> None:
        turns = list(deal.turns.order_by("seq"))
        counter = turns[1]

        html = page(logged_in, deal)

        heads = [
            '<span class="seq">Turn 1</span> · <strong>The counterparty (theirs)</strong> · '
            '<span class="action">propose</span>',
            '<span class="seq">Turn 2</span> · <strong>Tomas&#x27;s agent (ours)</strong> · '
            '<span class="action">propose</span>',
            '<span class="seq">Turn 3</span> · <strong>The counterparty (theirs)</strong> · '
            '<span class="action">accept</span>',
            '<span class="seq">Turn 4</span> · <strong>Tomas&#x27;s agent (ours)</strong> · '
            '<span class="action">accept</span>',
        ]
        positions = [html.index(h) for h in heads]
        assert positions == sorted(positions)
        assert '<p class="said">Would €800 a day work?</p>' in html
        assert (
            '<dt>Terms</dt><dd><dl class="terms"><div><dt>amount</dt><dd>800</dd></div>'
            "<div><dt>currency</dt><dd>EUR</dd></div></dl></dd>"
        ) in html
        assert "<dt>offerId</dt><dd><code>o-1</code></dd>" in html
        assert f"<dt>offerId</dt><dd><code>{counter.offer_id}</code></dd>" in html
        assert (
            f'<dt>Accepts offerId</dt><dd><code>{counter.offer_id}</code> (<a href="#turn-2">turn 2</a>)</dd>'
        ) in html
        assert html.count('<a href="#turn-2">turn 2</a>') == 2  # their accept and our confirmation
        assert '<li class="turn turn-theirs" id="turn-3">' in html

    def test_the_settlement_with_badges_reason_terms_and_who_ended_it(
        self, logged_in: Client, deal: Negotiation
    ) -> None:
        settlement = deal.settlement
        amount = settlement.terms["amount"]

        html = page(logged_in, deal)

        assert (
            '<p class="badges"><span class="badge badge-agreed">agreed</span> '
            '<span class="badge badge-basis">basis: reference</span></p>'
        ) in html
        assert f"<dt>Reason</dt><dd>{escape(settlement.reason)}</dd>" in html
        assert (
            f'<dt>Terms</dt><dd><dl class="terms"><div><dt>amount</dt><dd>{amount}</dd></div>'
            "<div><dt>currency</dt><dd>EUR</dd></div></dl></dd>"
        ) in html
        assert "<dt>Ended by</dt><dd>us (Tomas&#x27;s agent)</dd>" in html
        assert "Disputed" not in html

    def test_a_disputed_settlement_and_terms_that_are_not_strings_read_as_sent(
        self, logged_in: Client, agent: Agent
    ) -> None:
        n = outbound(
            agent,
            "Idris Haddad",
            status=Negotiation.Status.SETTLED,
            settlement={
                "outcome": Settlement.Outcome.CONFLICT,
                "basis": Settlement.Basis.PROSE,
                "reason": "Both sides named amounts, none shared.",
                "ended_by": Turn.Side.THEIRS,
                "disputed": {"mine": [900], "theirs": [1031]},
            },
        )
        Turn.across_tenants.filter(negotiation=n, seq=2).update(
            terms={"amount": "450", "remote": True, "start": None, "window": {"from": "2025-01-06"}}
        )

        html = page(logged_in, n)

        assert '<span class="badge badge-conflict">conflict</span>' in html
        assert '<span class="badge badge-basis">basis: prose</span>' in html
        assert "<dt>Ended by</dt><dd>them (Idris Haddad)</dd>" in html
        assert (
            '<dt>Disputed</dt><dd><dl class="terms"><div><dt>mine</dt><dd>[900]</dd></div>'
            "<div><dt>theirs</dt><dd>[1031]</dd></div></dl></dd>"
        ) in html
        assert "<dt>Terms</dt><dd>none</dd>" in html
        assert (
            '<dl class="terms"><div><dt>amount</dt><dd>450</dd></div><div><dt>remote</dt><dd>true</dd></div>'
            "<div><dt>start</dt><dd>null</dd></div>"
            "<div><dt>window</dt><dd>{&quot;from&quot;:&quot;2025-01-06&quot;}</dd></div></dl>"
        ) in html

    def test_an_open_negotiation_has_no_settlement_yet(self, logged_in: Client, agent: Agent) -> None:
        html = page(logged_in, outbound(agent, "Idris Haddad", turns=0))

        assert "<p>No turns yet.</p>" in html
        assert "<h2>Settlement</h2>\n\n<p>Not settled.</p>" in html
        assert (
            '<dt>Counterparty</dt><dd>Idris Haddad<br><span class="meta">https://example.org/a2a/idris</span>'
            in html
        )

    def test_what_deciding_our_moves_cost_per_turn_and_in_all(
        self, logged_in: Client, agent: Agent, chat: ChatServer
    ) -> None:
        agent.term_guards = FLOOR
        agent.save()
        on_chat_model(agent, chat)
        ModelEndpoint.across_tenants.filter(name="house-model").update(currency="EUR")
        chat.responder = NegotiatingPolicy()
        for amount in (800, 850):
            inbound(
                agent,
                {
                    "action": "propose",
                    "message": f"€{amount}?",
                    "terms": {"amount": amount, "currency": "EUR"},
                },
            )
        n = Negotiation.across_tenants.get(agent=agent)

        html = page(logged_in, n)

        # 10 input and 5 output tokens a decision at 2 and 8 EUR per million.
        used = "Decided by model house-model · 10 tokens in, 5 out · cost 0.000060 EUR"
        assert html.count(f'<p class="meta usage">{used}</p>') == 2
        assert html.index("Turn 2") < html.index(used) < html.index("Turn 3")
        assert (
            "<dt>Model usage</dt><dd>20 tokens in, 10 out · cost 0.000120 EUR "
            '<span class="meta">(deciding our moves, failed decisions included)</span></dd>'
        ) in html

    def test_the_offline_strategy_costs_nothing(self, logged_in: Client, deal: Negotiation) -> None:
        html = page(logged_in, deal)

        assert 'class="meta usage"' not in html
        assert "<dt>Model usage</dt><dd>0 tokens in, 0 out · cost 0.000000 <span" in html


class TestEscaping:
    def test_html_a_counterparty_wrote_is_shown_as_text(self, logged_in: Client, deal: Negotiation) -> None:
        inbound(
            deal.agent,
            {
                "action": "propose",
                "message": '<script>alert("hi")</script><b>€1,000</b>',
                "terms": {"<i>amount</i>": "<u>1000</u>"},
                "offerId": "o-9",
            },
            task_id="task-evil",
        )
        evil = Negotiation.across_tenants.get(task_id="task-evil")
        Negotiation.across_tenants.filter(pk=evil.pk).update(counterparty_name="<em>Mallory</em>")

        html = page(logged_in, evil)

        assert (
            '<p class="said">&lt;script&gt;alert(&quot;hi&quot;)&lt;/script&gt;&lt;b&gt;€1,000&lt;/b&gt;</p>'
            in html
        )
        assert "<dt>&lt;i&gt;amount&lt;/i&gt;</dt><dd>&lt;u&gt;1000&lt;/u&gt;</dd>" in html
        assert "↔ &lt;em&gt;Mallory&lt;/em&gt;</h1>" in html
        for raw in ("<script>", "<b>€", "<i>amount", "<u>1000", "<em>Mallory"):
            assert raw not in html


class TestLive:
    def test_the_fragment_is_the_live_region_alone(self, logged_in: Client, deal: Negotiation) -> None:
        full = page(logged_in, deal)
        fragment = page(logged_in, deal, fragment="1")

        assert f'data-live-src="{detail_url(deal)}?fragment=1"' in full
        assert "<html" not in fragment
        assert fragment.strip().startswith('<section data-live="negotiation"')
        assert 'data-announce="Settled, 4 turns, agreed"' in fragment
        assert "Turn 4" in fragment

    def test_the_fragment_shows_turns_recorded_since(self, logged_in: Client, agent: Agent) -> None:
        agent.term_guards = FLOOR
        agent.save()
        inbound(agent, {"action": "propose", "message": "€800?", "terms": {"amount": 800, "currency": "EUR"}})
        n = Negotiation.across_tenants.get(agent=agent)
        assert 'data-announce="Open, 2 turns"' in page(logged_in, n, fragment="1")

        inbound(agent, {"action": "propose", "message": "€850?", "terms": {"amount": 850, "currency": "EUR"}})

        fragment = page(logged_in, n, fragment="1")
        assert 'data-announce="Open, 4 turns"' in fragment
        assert '<p class="said">€850?</p>' in fragment


def prompt_url(n: Negotiation, tenant: Tenant | None = None) -> str:
    return reverse("negotiations:prompt", kwargs={"tenant": (tenant or n.tenant).slug, "pk": n.pk})


class TestDecisionPrompt:
    @pytest.fixture
    def ops(self, client: Client, operator: AbstractUser) -> Client:
        client.force_login(operator)
        return client

    def test_shows_the_system_message_the_record_and_the_tool_schema(
        self, ops: Client, agent: Agent, chat: ChatServer
    ) -> None:
        on_chat_model(agent, chat)
        n = outbound(agent, "Idris Haddad")
        Negotiation.across_tenants.filter(pk=n.pk).update(guidance=["Up to €1,100 a day."])
        n.refresh_from_db()
        before = list(Turn.across_tenants.filter(negotiation=n).values_list("seq", "updated_at"))

        response = ops.get(prompt_url(n))

        html = response.content.decode()
        assert response.status_code == 200
        prompt = selectors.decision_prompt(n)
        system, record = (m["content"] for m in prompt.messages)
        assert f'<h2>System message</h2>\n<pre class="prompt-system">{escape(system)}</pre>' in html
        assert f'<h2>Record message</h2>\n<pre class="prompt-user">{escape(record)}</pre>' in html
        parameters = json.dumps(prompt.tool.parameters, indent=2, ensure_ascii=False)
        assert f'<pre class="prompt-tool">{escape(parameters)}</pre>' in html
        assert "<h2>Tool <code>decide_move</code></h2>" in html
        assert "- Up to €1,100 a day." in system
        assert "Sent to the model <code>house-model</code>." in html
        assert "offline" not in html
        assert list(Turn.across_tenants.filter(negotiation=n).values_list("seq", "updated_at")) == before
        assert chat.requests == []  # a preview asks no model

    def test_on_offline_it_says_the_strategy_decides_and_shows_what_a_model_would_see(
        self, ops: Client, deal: Negotiation
    ) -> None:
        html = ops.get(prompt_url(deal)).content.decode()

        assert (
            "This agent's model is <code>offline</code>: its boulware concession strategy decides each "
            "move, and no prompt is sent. Below is what a chat model would be shown."
        ) in html
        assert "They contacted us: the next decision comes with the counterparty's next message" in html
        assert '<pre class="prompt-system">' in html

    def test_what_the_negotiator_cannot_build_is_named(
        self, ops: Client, agent: Agent, intent: Intent
    ) -> None:
        Intent.across_tenants.filter(pk=intent.pk).update(
            term_guards=[{"term": "amount", "op": "<", "value": 1}]
        )
        n = outbound(agent, "Idris Haddad", intent=intent)

        html = ops.get(prompt_url(n)).content.decode()

        assert (
            "It cannot be built, and the negotiator could not decide either: intent term guard 1 has op "
            "&#x27;&lt;&#x27;; use one of &lt;=, &gt;=, ==, in"
        ) in html
        assert "prompt-system" not in html

    def test_the_negotiation_page_links_it_for_operators_and_owners_only(
        self, client: Client, tenant: Tenant, operator: AbstractUser, deal: Negotiation
    ) -> None:
        link = f'<a href="{prompt_url(deal)}">Decision prompt</a>'
        owner = member(tenant, "omar", Membership.Role.OWNER)
        for user in (operator, owner):
            client.force_login(user)
            assert link in page(client, deal)
            assert link in page(client, deal, fragment="1")
            assert client.get(prompt_url(deal)).status_code == 200
        for user in (deal.agent.principal, member(tenant, "vera", Membership.Role.VIEWER)):
            client.force_login(user)
            assert "Decision prompt" not in page(client, deal)
            response = client.get(prompt_url(deal))
            assert response.status_code == 403
            assert "You act for" not in response.content.decode()

    def test_another_tenants_negotiation_is_404(self, ops: Client, tenant: Tenant, seller: Agent) -> None:
        foreign = inbound_deal(seller, opening="Globex wants you")

        for url in (prompt_url(foreign, tenant), prompt_url(foreign)):
            response = ops.get(url)
            assert response.status_code == 404
            assert "Globex wants you" not in response.content.decode()


class TestTenancy:
    def test_another_tenants_negotiation_is_404(
        self, logged_in: Client, tenant: Tenant, seller: Agent
    ) -> None:
        foreign = inbound_deal(seller, opening="Globex wants you")
        before = list(Turn.across_tenants.filter(negotiation=foreign).values_list("seq", "message"))

        for url in (
            detail_url(foreign, tenant),
            detail_url(foreign),
            detail_url(foreign, tenant) + "?fragment=1",
        ):
            response = logged_in.get(url)
            assert response.status_code == 404
            assert "Globex wants you" not in response.content.decode()
        assert list(Turn.across_tenants.filter(negotiation=foreign).values_list("seq", "message")) == before
