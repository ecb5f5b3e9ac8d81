"""The evaluation hook: a host URL that attaches an artifact to each turn (issue 4, "Optional evaluation").

The request is one JSON POST (:class:`Request`) to a URL the tenant chose, so it
goes to public addresses only (:mod:`parley.outbound`); the answer must be a JSON
object ``{"artifact": {...}}``. Whatever goes wrong — the address policy
refusing the URL, no connection, a timeout, a status other than 2xx, a body that
is not that shape — reaches the caller as :class:`EvaluationError`. A hook is
advisory: callers log the error and go on without the artifact.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, TypedDict

import httpx

from negotiations.wire import nul_path
from parley import netguard, outbound

TIMEOUT = 10.0
# The artifact is stored on the turn and may ride on the A2A Task; a hook gets no more room
# than a counterparty's whole request has (A2A_MAX_BODY_BYTES).
MAX_BYTES = 64 * 1024
MAX_DEPTH = 32


class EvaluationError(Exception):
    """The hook could not be reached or did not answer ``{"artifact": {...}}``; the message says which."""


class TurnFacts(TypedDict):
    """One turn as the hook sees it; ``terms`` is null and the ids "" when the move had none."""

    seq: int
    side: str
    action: str
    message: str
    terms: dict[str, Any] | None
    offerId: str
    acceptsOfferId: str


class Request(TypedDict):
    """The body POSTed to the hook: ids as strings, ``direction`` outbound | inbound, and the
    A2A 0.3 task state stamped with the turn."""

    negotiation: str
    agent: str
    direction: str
    turn: TurnFacts
    taskState: str


@dataclass(frozen=True)
class Evaluation:
    """What the hook attached to the turn: any JSON object."""

    artifact: dict[str, Any]


def evaluate(url: str, request: Request, *, timeout: float = TIMEOUT) -> Evaluation:
    """POST ``request`` to the hook at ``url`` and return its artifact.

    Waits at most ``timeout`` seconds in all (a hook that trickles its answer is
    cut off); redirects are not followed. Raises :class:`EvaluationError`; when the address policy
    refuses the URL, "<url> was not called: the host '<host>' resolves to a private address; …"
    and nothing was sent.
    """
    deadline = time.monotonic() + timeout
    try:
        with (
            outbound.client(timeout=timeout) as http,
            http.stream("POST", url, json=request, headers={"Accept": "application/json"}) as response,
        ):
            if not response.is_success:
                raise EvaluationError(f"{url} answered HTTP {response.status_code}")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_BYTES:
                    raise EvaluationError(f"{url} answered more than {MAX_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout("the answer kept coming past the deadline")
    except netguard.AddressRefused as exc:
        raise EvaluationError(f"{url} was not called: {exc}") from exc
    except httpx.TimeoutException as exc:
        raise EvaluationError(f"{url} did not answer within {timeout:g} s") from exc
    except httpx.HTTPError as exc:
        raise EvaluationError(f"{url}: {type(exc).__name__}: {exc}") from exc
    try:
        answer = json.loads(body)
        artifact = answer.get("artifact") if isinstance(answer, dict) else None
        # Postgres cannot store a NUL in jsonb; the write would fail after the turn.
        nul = nul_path(artifact, "artifact")
    except (ValueError, RecursionError) as exc:
        raise EvaluationError(f"{url} answered with a body that is not JSON we can read") from exc
    if not isinstance(artifact, dict):
        raise EvaluationError(f'{url} answered without an object "artifact"')
    if nul:
        raise EvaluationError(f"{url} answered with a NUL character in the artifact")
    if _depth(artifact) > MAX_DEPTH:
        # A2A Tasks are protobuf, which refuses deeper nesting when the artifact is attached.
        raise EvaluationError(f"{url} answered with an artifact nested deeper than {MAX_DEPTH} levels")
    return Evaluation(artifact=artifact)


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0
