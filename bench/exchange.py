"""Benchmark: Agent Exchange at a recipient's endpoint, and what the MCP gateway adds to one A2A message.

The production shape on this machine: one uvicorn web process (``parley.asgi``,
both gateways) on loopback, Postgres for the data, Redis for the caps'
counters and as the Celery broker. No worker runs: a run that an executed
request starts stays queued in Redis; what is measured is the endpoint.

**Agent Exchange** (docs/agent-exchange.md), to an agent with
``inbound_auth=api_key`` (``X-API-Key``) whose profile trusts a P-256 key this
process signs with:

* **prepare** — ``POST <agent>/agent-exchange/preparation`` of a complete
  request (a fresh ``exchangeId``, a fresh ``at+jwt`` delegation token,
  protected values). The endpoint validates it, verifies the token (ES256)
  and stores it. Every answer is checked: 200, the preparation media type,
  exactly ``{"reference"}`` and the reference derived here.
* **execute** — ``SendMessage`` (``A2A-Version: 1.0``) with the extension
  activated (the ``A2A-Extensions`` header and ``message.extensions``) and one
  data part ``{"reference"}``, each one a request prepared above and not run
  yet. The endpoint verifies the token again, starts the run (an intent, a
  Run, a Celery message), deletes the request and stores the Task. Every
  answer is checked: a COMPLETED task whose one artifact is the receipt naming
  its reference and ``exchangeId``.

**MCP gateway** (README, "The MCP gateway"): bench/gateway.py's ``propose``
(€800 a day, a new task each) to an anonymous agent on the ``offline`` model
with a floor of 950, which counters:

* **direct** — the JSON-RPC ``SendMessage`` to the agent's endpoint;
* **mcp** — the same message through the ``ask_bridge`` tool: one raw
  stateless MCP ``tools/call`` POST to ``/mcp/<tenant>`` (no ``initialize``),
  which the gateway sends on as that ``SendMessage`` over loopback HTTP to
  ``PUBLIC_BASE_URL``, the same process: one call is two requests there.

Every answer is checked to be a task awaiting the buyer's next move
(INPUT_REQUIRED; through MCP, not a tool error).

For each number of concurrent clients (coroutines sharing one
``httpx.AsyncClient`` with as many connections): a warm-up, then the measured
requests; direct and mcp take turns. The bodies (tokens signed, references
derived) are made before the clock starts. Reported: requests/s over the
measured wall time, p50 and p99 latency (nearest rank), and mcp/direct
ratios. The client runs on the same cores as the server.

    .venv/bin/python bench/exchange.py [--requests 200] [--warmup 20] [--concurrency 1 8]

Uses a fresh database ``parley_bench_ex`` (dropped and created) and the Redis database of
``BENCH_REDIS_URL`` (bench/stack.py), which it empties
before and after (the queued runs go with it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from gateway import AGENT_CAPS, body, machine
from stack import REDIS_URL, database_url, free_port, fresh_database, percentile, stop, wait

DATABASE = "parley_bench_ex"
TENANT, RECIPIENT, SELLER = "bench", "recipient", "seller"
ISSUER, KID = "https://auth.party.example", "bench-key-1"
# A request and its token outlive any run of the default sizes many times over.
LIFETIME = 3600
MCP_ACCEPT = "application/json, text/event-stream"

Check = Callable[[Any, int], str | None]
"""Given an answer (an ``httpx.Response``) and the index of its request: what is wrong with it, or None."""


@dataclass(frozen=True)
class Result:
    wall: float  # seconds
    latencies: list[float]  # seconds, one per request

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.wall

    def ms(self, p: int) -> float:
        """The ``p``-th percentile latency in milliseconds."""
        return percentile(self.latencies, p) * 1000


# --- The party's authorisation server ----------------------------------------------------------------


def jwks_of(key: ec.EllipticCurvePrivateKey) -> dict[str, Any]:
    """The public key set the recipient's profile is given."""
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    return {"keys": [{**public, "kid": KID, "use": "sig", "alg": "ES256"}]}


def exchange_request(key: ec.EllipticCurvePrivateKey, recipient: str) -> dict[str, Any]:
    """A complete Agent Exchange request to ``recipient`` (its A2A URL), delegated by a fresh token."""
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "sub": "party:tomas",
        "aud": recipient,
        "scope": "agent-exchange",
        "iat": now,
        "exp": now + LIFETIME,
    }
    token = jwt.encode(claims, key, algorithm="ES256", headers={"kid": KID, "typ": "at+jwt"})
    return {
        "exchangeId": f"ex-{uuid.uuid4().hex}",
        "recipient": recipient,
        "purpose": "Book a repair visit for the boiler",
        "instruction": "Book the earliest repair visit next week and confirm the slot.",
        "expiresAt": now + LIFETIME,
        "delegation": {"accessToken": token},
        "protected": {"mailbox": {"user": "tomas@example.com", "password": "hunter2-secret"}},
    }


# --- Bodies and checks -------------------------------------------------------------------------------


def exchange_message(reference: str, *, request_id: int) -> bytes:
    """A JSON-RPC 1.0 SendMessage of an Agent Exchange message: the extension listed, one reference part."""
    from exchange import wire

    part = {"data": {"reference": reference}, "mediaType": wire.REFERENCE_MEDIA_TYPE}
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [part],
        "extensions": [wire.EXTENSION_URI],
    }
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "SendMessage", "params": {"message": message}}
    ).encode()


def ask_bridge(agent: str, *, request_id: int) -> bytes:
    """A stateless MCP ``tools/call`` of ``ask_bridge`` carrying the message of :func:`gateway.body`."""
    message = json.loads(body(request_id=request_id))["params"]["message"]
    call = {"name": "ask_bridge", "arguments": {"agent": agent, "message": message}}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": call}).encode()


def answer_json(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def prepared_check(references: list[str]) -> Check:
    """200, the preparation media type, and exactly the reference derived here."""
    from exchange import wire

    def check(response: Any, i: int) -> str | None:
        if response.status_code != 200 or response.headers.get("content-type") != wire.PREPARATION_MEDIA_TYPE:
            return "not a 200 in the preparation media type"
        if answer_json(response) != {"reference": references[i]}:
            return f"not the reference derived here, {references[i]}"
        return None

    return check


def receipt_check(references: list[str], exchange_ids: list[str]) -> Check:
    """A COMPLETED task whose one artifact is the receipt of the request prepared under the reference."""
    from exchange import wire

    def check(response: Any, i: int) -> str | None:
        try:
            task = answer_json(response)["result"]["task"]
            [artifact] = task["artifacts"]
            [part] = artifact["parts"]
            state, receipt = task["status"]["state"], part["data"]
            shape = (artifact["artifactId"], part["mediaType"], receipt["reference"], receipt["exchangeId"])
        except (KeyError, TypeError, ValueError):
            return "not a task with one one-part artifact"
        if state != "TASK_STATE_COMPLETED":
            return f"the task is {state}"
        expected = (wire.RECEIPT_ARTIFACT_ID, wire.RECEIPT_MEDIA_TYPE, references[i], exchange_ids[i])
        return None if shape == expected else f"not the receipt of {references[i]}: {shape}"

    return check


def task_check(*, through_mcp: bool) -> Check:
    """A task awaiting the buyer's next move: the SendMessage result, or the tool's structured result."""

    def check(response: Any, i: int) -> str | None:
        try:
            result = answer_json(response)["result"]
            if through_mcp:
                if result["isError"]:
                    return "a tool error"
                result = result["structuredContent"]
            state = result["task"]["status"]["state"]
        except (KeyError, TypeError, ValueError):
            return "not a task"
        return None if state == "TASK_STATE_INPUT_REQUIRED" else f"the task is {state}"

    return check


async def load(
    url: str, headers: dict[str, str], bodies: list[bytes], check: Check, *, concurrency: int
) -> Result:
    """POST ``bodies`` from ``concurrency`` clients; exits at the first answer ``check`` finds wrong."""
    import httpx

    latencies: list[float] = []
    left = iter(range(len(bodies)))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits, headers=headers) as http:

        async def client() -> None:
            for i in left:
                started = time.perf_counter()
                response = await http.post(url, content=bodies[i])
                latencies.append(time.perf_counter() - started)
                if (wrong := check(response, i)) is not None:
                    said = f"{response.status_code} {response.text[:300]}"
                    raise SystemExit(f"unexpected answer from {url} ({wrong}): {said}")

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        return Result(time.perf_counter() - started, latencies)


# --- The run -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="measured requests per case and level")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured requests before each measurement")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    if args.requests < 1 or args.warmup < 0 or min(args.concurrency) < 1:
        parser.error("--requests and --concurrency must be at least 1, --warmup at least 0")

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url(DATABASE),
        "REDIS_URL": REDIS_URL,
        "PUBLIC_BASE_URL": base,
        "DJANGO_SETTINGS_MODULE": "parley.settings.base",
        "LOG_LEVEL": "ERROR",
    }
    fresh_database(env, DATABASE)
    from importlib.metadata import version

    import httpx
    import redis
    from django.conf import settings

    from a2a_gateway.auth import inbound_key_create
    from agents.addresses import agent_url
    from agents.models import Agent, Run
    from exchange import services, wire
    from exchange.models import PreparedExchange
    from parley import devstack
    from parley.edge import API_KEY_HEADER
    from parley.models import Tenant

    redis.Redis.from_url(REDIS_URL).flushdb()
    tenant = Tenant.objects.create(slug=TENANT, name="Bench", model_budget=None)
    terms = "amount (number, EUR per day), currency"
    recipient = Agent.objects.create(
        tenant=tenant,
        slug=RECIPIENT,
        name="Recipient",
        terms=terms,
        inbound_auth=Agent.InboundAuth.API_KEY,
        **AGENT_CAPS,
    )
    seller = Agent.objects.create(
        tenant=tenant,
        slug=SELLER,
        name="Seller",
        terms=terms,
        term_guards=[{"term": "amount", "op": ">=", "value": 950, "currency": "EUR"}],
        **AGENT_CAPS,
    )
    signing_key = ec.generate_private_key(ec.SECP256R1())
    services.profile_save(agent=recipient, values={"issuer": ISSUER, "jwks": jwks_of(signing_key)})
    _, key = inbound_key_create(agent=recipient, name="bench requester")
    recipient_url, seller_url = agent_url(recipient), agent_url(seller)
    prepare_headers = {
        "Content-Type": wire.PREPARATION_MEDIA_TYPE,
        "Accept": wire.PREPARATION_MEDIA_TYPE,
        API_KEY_HEADER: key,
    }
    a2a = {"A2A-Version": "1.0", "Content-Type": "application/json"}
    execute_headers = {**a2a, "A2A-Extensions": wire.EXTENSION_URI, API_KEY_HEADER: key}
    mcp_headers = {"Content-Type": "application/json", "Accept": MCP_ACCEPT}
    targets: dict[str, tuple[str, dict[str, str], Callable[[int], bytes], Check]] = {
        "direct": (seller_url, a2a, lambda i: body(request_id=i), task_check(through_mcp=False)),
        "mcp": (
            f"{base}/mcp/{TENANT}",
            mcp_headers,
            lambda i: ask_bridge(SELLER, request_id=i),
            task_check(through_mcp=True),
        ),
    }

    print(machine())
    print(
        f"         mcp {version('mcp')}, PyJWT {version('PyJWT')}, cryptography {version('cryptography')}\n"
        f"server:  parley.asgi under uvicorn, one process (devstack.start_web); Postgres {DATABASE} "
        f"(CONN_MAX_AGE={settings.DATABASES['default']['CONN_MAX_AGE']}), Redis {REDIS_URL}, no worker; "
        f"the client (httpx, one process) shares the cores\n"
        f"agents:  {', '.join(f'{k}={v}' for k, v in AGENT_CAPS.items())}; tenant without a model budget\n"
        f"exchange: {RECIPIENT} (api_key), ES256 at+jwt delegation, no mandate; prepare, then SendMessage "
        f"of each reference once\n"
        f"mcp:     propose to {SELLER} (anonymous, offline model), SendMessage direct vs ask_bridge "
        f"(stateless tools/call)\n"
        f"load:    {args.warmup} warm-up + {args.requests} measured requests per case and level"
    )
    web = devstack.start_web(port, env, None)
    try:
        wait(lambda: httpx.get(f"{base}/login/", timeout=1).status_code == 200)
        exchange: dict[tuple[str, int], Result] = {}
        for concurrency in args.concurrency:
            for measured, size in ((False, args.warmup), (True, args.requests)):
                if not size:
                    continue
                requests = [exchange_request(signing_key, recipient_url) for _ in range(size)]
                references = [wire.reference_of(r) for r in requests]
                bodies = [json.dumps({"request": r}).encode() for r in requests]
                prepared = asyncio.run(
                    load(
                        f"{recipient_url}{wire.PREPARATION_PATH}",
                        prepare_headers,
                        bodies,
                        prepared_check(references),
                        concurrency=concurrency,
                    )
                )
                messages = [exchange_message(r, request_id=i) for i, r in enumerate(references)]
                exchange_ids = [r["exchangeId"] for r in requests]
                executed = asyncio.run(
                    load(
                        recipient_url,
                        execute_headers,
                        messages,
                        receipt_check(references, exchange_ids),
                        concurrency=concurrency,
                    )
                )
                if measured:
                    exchange["prepare", concurrency] = prepared
                    exchange["execute", concurrency] = executed
        mcp: dict[tuple[str, int], Result] = {}
        for concurrency in args.concurrency:
            for name, (url, headers, make, check) in targets.items():
                for measured, size in ((False, args.warmup), (True, args.requests)):
                    if not size:
                        continue
                    bodies = [make(i) for i in range(size)]
                    result = asyncio.run(load(url, headers, bodies, check, concurrency=concurrency))
                    if measured:
                        mcp[name, concurrency] = result
    finally:
        stop([web])
        redis.Redis.from_url(REDIS_URL).flushdb()

    # Every request ran once, each starting one run; nothing is left prepared.
    total = len(args.concurrency) * (args.warmup + args.requests)
    runs = Run.objects.for_tenant(tenant).filter(agent=recipient).count()
    prepared = PreparedExchange.objects.for_tenant(tenant)
    executed_rows = prepared.filter(executed_at__isnull=False, request__isnull=True).count()
    if runs != total or executed_rows != total or prepared.count() != total:
        raise SystemExit(f"expected {total} executed requests and runs, found {executed_rows} and {runs}")

    print()
    print(f"{'agent exchange':<15} {'clients':>7} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for concurrency in args.concurrency:
        for name in ("prepare", "execute"):
            r = exchange[name, concurrency]
            print(f"{name:<15} {concurrency:>7} {r.throughput:>9.1f} {r.ms(50):>8.2f} {r.ms(99):>8.2f}")
    print()
    print(f"{'mcp gateway':<15} {'clients':>7} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for concurrency in args.concurrency:
        for name in targets:
            r = mcp[name, concurrency]
            print(f"{name:<15} {concurrency:>7} {r.throughput:>9.1f} {r.ms(50):>8.2f} {r.ms(99):>8.2f}")
    print()
    print(f"{'mcp/direct':<15} {'clients':>7} {'req/s':>9} {'p50':>8} {'p99':>8}")
    for concurrency in args.concurrency:
        m, d = mcp["mcp", concurrency], mcp["direct", concurrency]
        print(
            f"{'':<15} {concurrency:>7} {m.throughput / d.throughput:>9.2f} "
            f"{m.ms(50) / d.ms(50):>8.2f} {m.ms(99) / d.ms(99):>8.2f}"
        )


if __name__ == "__main__":
    main()
