"""Benchmark: the dashboard's pages and the API's lists at 10,000 negotiations and 1,000 open questions,
divided by the same at 10 (issue 19). The goal is O(1): the same queries, and time at most 1.5x.

One fresh Postgres database. First a small tenant alone (10 negotiations, 10
open questions), measured; then a large tenant (10,000 negotiations, 1,000
open questions) is added beside it, and the small and the large tenant are
measured alternately, page by page. The small tenant's two columns show that
another tenant's bulk costs nothing (isolation); the large tenant's ratio to
the small one beside it is the figure.

Each tenant is made in bulk (``bulk_create``), as work leaves it: four agents
with a principal each; a run per intent; every open question on a run of its
own waiting on its party, and as many answered ones; negotiations of both
directions, four turns each, most settled (agreed, with terms), some open,
some waiting on the party, created over 90 days. Pages are asked with
Django's test client, in process: logged in as an operator (the inbox, the
negotiation board in each of its orders, its second page, the runs page, an
agent's page, a negotiation's page), and every list of ``/api/v1/`` with an API
key. For each: SQL statements, median ms, bytes of the body, at 10 (alone and
beside the bulk) and at 10,000, and the ratios. A full page holds 50 rows where
the small tenant has 10: ``api negotiations page_size=10`` asks both for 10, to
tell what the bulk costs from what a fuller page costs. The "alone" column is
measured before the bulk exists, so not alternated with the others: read its
ratio against the machine's load.

    .venv/bin/python bench/pages.py [--repeats 9] [--smoke]

Uses a fresh database ``parley_bench_pages_h`` (dropped and created) on ``BENCH_POSTGRES_URL``, and the
Redis database ``BENCH_REDIS_URL``, which it empties (bench/stack.py).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from stack import REDIS_URL, database_url, fresh_database

DATABASE_NAME = "parley_bench_pages_h"
AGENTS = 4
TURNS = 4
BOARD_SORTS = ("-turns", "-cost", "-surplus", "-share")


@dataclass
class Tenancy:
    """A tenant made for the benchmark and what its pages are asked with."""

    slug: str
    operator: Any
    key: str
    agent_id: Any
    negotiation_id: Any
    samples: dict[str, list[tuple[int, float, int]]] = field(default_factory=dict)
    clients: dict[str, Any] = field(default_factory=dict)

    def client(self, api: bool) -> Any:
        """The test client of the API (with the key) or of the dashboard (logged in), made once."""
        from django.test import Client

        if not self.clients:
            self.clients["api"] = Client(HTTP_AUTHORIZATION=f"Bearer {self.key}")
            self.clients["page"] = Client()
            self.clients["page"].force_login(self.operator)
        return self.clients["api" if api else "page"]


def populate(slug: str, negotiations: int, questions: int) -> Tenancy:
    """Make tenant ``slug`` with ``negotiations`` negotiations and ``questions`` open questions, in bulk."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from agents.models import Agent, Intent, Question, Run
    from negotiations.models import Negotiation, Settlement, Turn
    from negotiations.services import recording
    from parley.models import Membership, Tenant
    from parley.services import api_key_create

    rng = random.Random(slug)
    users = get_user_model().objects
    tenant = Tenant.objects.create(slug=slug, name=slug.title())
    owner = users.create_user(username=f"{slug}-owner", password="x")
    operator = users.create_user(username=f"{slug}-operator", password="x")
    Membership.objects.create(user=owner, tenant=tenant, role=Membership.Role.OWNER)
    Membership.objects.create(user=operator, tenant=tenant, role=Membership.Role.OPERATOR)
    agents = []
    for i in range(AGENTS):
        principal = users.create_user(username=f"{slug}-party-{i}", password="x")
        Membership.objects.create(user=principal, tenant=tenant, role=Membership.Role.PRINCIPAL)
        agents.append(
            Agent.objects.create(
                tenant=tenant,
                slug=f"party-{i}",
                name=f"Party {i}'s agent",
                party_id=f"{slug}:user:{i}",
                system_prompt="You act for your party.",
                terms="amount (number, EUR per day), currency",
                principal=principal,
            )
        )
    # An intent and a run per open question (each waits on its party), as many answered ones, and one
    # intent a run for every ten negotiations.
    threads = 2 * questions + max(1, negotiations // 10)
    intents = Intent.objects.bulk_create(
        Intent(
            tenant=tenant,
            agent=agents[i % AGENTS],
            statement=f"Bring in a fractional CFO, thread {i}.",
            term_guards=[{"term": "amount", "op": "<=", "value": 1200}],
        )
        for i in range(threads)
    )
    runs = Run.objects.bulk_create(
        Run(
            tenant=tenant,
            agent=intent.agent,
            intent=intent,
            status=Run.Status.NEEDS_INPUT if i < questions else Run.Status.DONE,
            task="Find a CFO for two days a week.",
            step_count=3,
        )
        for i, intent in enumerate(intents)
    )
    Question.objects.bulk_create(
        Question(
            tenant=tenant,
            run=run,
            tool_call_id=f"call-{i}",
            tool_name="ask_user",
            question=f"What is the most you would pay per day? (thread {i})",
            answer="" if i < questions else "1100 EUR",
            answered_at=None if i < questions else timezone.now(),
            answered_by=None if i < questions else operator,
        )
        for i, run in enumerate(runs[: 2 * questions])
    )
    negotiation_intents = intents[2 * questions :]
    rows = []
    for i in range(negotiations):
        intent = negotiation_intents[i % len(negotiation_intents)]
        roll = rng.random()
        status = (
            Negotiation.Status.SETTLED
            if roll < 0.7
            else Negotiation.Status.OPEN
            if roll < 0.9
            else Negotiation.Status.WAITING
        )
        rows.append(
            Negotiation(
                tenant=tenant,
                agent=intent.agent,
                intent=intent,
                direction=Negotiation.Direction.OUTBOUND if i % 3 else Negotiation.Direction.INBOUND,
                counterparty_url=f"https://cfo-{i}.example.com/a2a",
                counterparty_name=f"CFO {i}",
                context_id=f"ctx-{slug}-{i}",
                task_id=f"task-{slug}-{i}",
                status=status,
                task_state="completed" if status == Negotiation.Status.SETTLED else "input-required",
                turn_count=TURNS // 2,
                turns_recorded=TURNS,
                objective="Two days a week at the lowest rate.",
                parked_question="What is your limit?" if status == Negotiation.Status.WAITING else "",
                input_tokens=rng.randrange(2000),
                output_tokens=rng.randrange(500),
                cost=Decimal(rng.randrange(10**6)) / 10**6,
            )
        )
    made = Negotiation.objects.bulk_create(rows, batch_size=2000)
    turns = []
    for n in made:
        for seq in range(1, TURNS + 1):
            ours = (seq % 2 == 1) == (n.direction == Negotiation.Direction.OUTBOUND)
            amount = 1000 + 50 * seq
            action = "accept" if seq == TURNS and n.status == Negotiation.Status.SETTLED else "propose"
            message = {"role": "user", "parts": [{"kind": "text", "text": f"{amount} EUR per day"}]}
            turns.append(
                Turn(
                    tenant=tenant,
                    negotiation=n,
                    seq=seq,
                    side=Turn.Side.OURS if ours else Turn.Side.THEIRS,
                    action=action,
                    message=f"We can do {amount} EUR per day.",
                    terms={"amount": amount, "currency": "EUR"},
                    offer_id=f"offer-{seq}",
                    accepts_offer_id=f"offer-{seq - 1}" if action == "accept" else "",
                    raw=message,
                    task_state="input-required",
                )
            )
    Turn.objects.bulk_create(turns, batch_size=5000)
    Settlement.objects.bulk_create(
        (
            Settlement(
                tenant=tenant,
                negotiation=n,
                outcome=Settlement.Outcome.AGREED,
                basis=Settlement.Basis.TERMS,
                terms={"amount": 1000 + 50 * TURNS, "currency": "EUR"},
                ended_by=Turn.Side.THEIRS,
            )
            for n in made
            if n.status == Negotiation.Status.SETTLED
        ),
        batch_size=5000,
    )
    # Each deal scored as recording the settlement scores it.
    settled = Negotiation.objects.for_tenant(tenant).filter(status=Negotiation.Status.SETTLED)
    for n in settled.select_related("agent", "intent", "settlement").iterator(chunk_size=1000):
        recording.score_save(n)
    # bulk_create stamps every row now: spread them over 90 days, as work leaves them.
    with connection.cursor() as cursor:
        for table in ("negotiations_negotiation", "agents_question", "agents_run", "agents_intent"):
            cursor.execute(
                f"update {table} set created_at = now() - random() * interval '90 days' where tenant_id = %s",
                [tenant.pk],
            )
        # Vacuumed as autovacuum leaves a table at rest (it is off on the benchmark machine): the updates
        # above leave a dead version of every row, which no working database keeps for long.
        cursor.execute("vacuum analyze")
    _, key = api_key_create(tenant=tenant, name="bench", scopes=["read"], user=owner)
    return Tenancy(slug, operator, key, agents[0].pk, made[0].pk)


def pages(t: Tenancy) -> dict[str, str]:
    """What is asked of each tenant, by name: dashboard pages, then every list of the API."""
    from api.urls import router

    base = f"/t/{t.slug}"
    asked = {
        "inbox": f"{base}/",
        "inbox (live fragment)": f"{base}/?fragment=1",
        "board": f"{base}/negotiations/",
        "board status=settled": f"{base}/negotiations/?status=settled",
        **{f"board sort={s}": f"{base}/negotiations/?sort={s}" for s in BOARD_SORTS},
        "runs": f"{base}/runs/",
        "agent": f"{base}/agents/{t.agent_id}/",
        "negotiation": f"{base}/negotiations/{t.negotiation_id}/",
    }
    for prefix, viewset, _ in router.registry:
        if hasattr(viewset, "list"):
            asked[f"api {prefix}"] = f"/api/v1/{prefix}"
    asked["api negotiations status=settled"] = "/api/v1/negotiations?status=settled"
    # As many rows as the small tenant has: what the bulk costs beside what a fuller page costs.
    asked["api negotiations page_size=10"] = "/api/v1/negotiations?page_size=10"
    return asked


def measure(t: Tenancy, name: str, url: str) -> None:
    """Ask ``url`` once as ``t``'s operator (the dashboard) or with its key (the API); keep its
    statements, time and size under ``name``."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = t.client(api=url.startswith("/api/"))
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = client.get(url)
        elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"{url}: {response.status_code} {response.content[:300]!r}")
    # The session and login statements are the client's, not the page's.
    counted = sum(1 for q in queries.captured_queries if "django_session" not in q["sql"])
    t.samples.setdefault(name, []).append((counted, elapsed, len(response.content)))


def run(tenancies: list[Tenancy], repeats: int) -> None:
    """Each page, ``repeats`` times (after one warm-up), the tenancies alternating."""
    names = pages(tenancies[0])
    for name in names:
        for t in tenancies:
            measure(t, f"warm {name}", pages(t)[name])
        for _ in range(repeats):
            for t in tenancies:
                measure(t, name, pages(t)[name])


def summary(samples: list[tuple[int, float, int]]) -> tuple[int, float, int]:
    counts = {s[0] for s in samples}
    return max(counts), statistics.median(s[1] for s in samples), max(s[2] for s in samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="measurements of each page per tenant")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one measurement: does it run")
    args = parser.parse_args()
    small_n, small_q, large_n, large_q = (3, 3, 30, 6) if args.smoke else (10, 10, 10_000, 1_000)
    repeats = 1 if args.smoke else args.repeats
    env = {
        **os.environ,
        "DATABASE_URL": database_url(DATABASE_NAME),
        "REDIS_URL": REDIS_URL,
        "DJANGO_SETTINGS_MODULE": "parley.settings.base",
        "LOG_LEVEL": "ERROR",
    }
    fresh_database(env, DATABASE_NAME)
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()

    alone = populate("small-alone", small_n, small_q)
    run([alone], repeats)
    started = time.monotonic()
    small = populate("small", small_n, small_q)
    large = populate("large", large_n, large_q)
    made = time.monotonic() - started
    print(f"made the tenants in {made:.1f} s; loadavg {os.getloadavg()}")
    run([small, large], repeats)

    print(
        f"pages: {small_n} negotiations/{small_q} open questions (alone, and beside the bulk) vs "
        f"{large_n}/{large_q}; {repeats} measurements each, alternating; loadavg {os.getloadavg()}"
    )
    header = (
        f"{'page':34} {'q@10a':>6} {'q@10':>5} {'q@10k':>5} {'ms@10a':>8} {'ms@10':>8} {'ms@10k':>8} "
        f"{'KB@10':>7} {'KB@10k':>8} {'10k/10':>7} {'10/10a':>7}"
    )
    print(header)
    for name in pages(small):
        qa, ta, _ = summary(alone.samples[name])
        qs, ts, bs = summary(small.samples[name])
        ql, tl, bl = summary(large.samples[name])
        flag = "" if ql == qs and tl <= 1.5 * ts else "  <- goal missed"
        print(
            f"{name:34} {qa:6d} {qs:5d} {ql:5d} {ta:8.1f} {ts:8.1f} {tl:8.1f} "
            f"{bs / 1024:7.1f} {bl / 1024:8.1f} {tl / ts:6.2f}x {ts / ta:6.2f}x{flag}"
        )
    print(f"loadavg {os.getloadavg()}")


if __name__ == "__main__":
    main()
