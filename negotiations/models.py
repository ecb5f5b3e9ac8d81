"""Negotiations, their turns and their settlements."""

from __future__ import annotations

import re
import uuid
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import models

from agents.models import Agent, Intent, Run
from parley.encryption import EncryptedCharField
from parley.models import TenantOwnedModel


class Batch(TenantOwnedModel):
    """One ``negotiate`` or ``answer`` tool call that waits for its negotiations to report.

    ``events`` holds the events known at call time (skipped targets, recorded
    guidance); the negotiations linked to the batch add theirs as they report.
    When every one has reported, the digest becomes the tool call's result.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="negotiation_batches")
    tool_call_id = models.CharField(max_length=200)
    events = models.JSONField(default=list)
    reported_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="one_batch_per_tool_call")
        ]


class Negotiation(TenantOwnedModel):
    """One exchange with one counterparty over one A2A Task."""

    class Direction(models.TextChoices):
        OUTBOUND = "outbound"
        INBOUND = "inbound"

    class Status(models.TextChoices):
        OPEN = "open"
        WAITING = "waiting", "waiting on the party"
        SETTLED = "settled"
        OUT_OF_TURNS = "out_of_turns", "out of turns"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="negotiations")
    intent = models.ForeignKey(
        Intent, null=True, blank=True, on_delete=models.SET_NULL, related_name="negotiations"
    )
    direction = models.CharField(max_length=8, choices=Direction.choices)
    counterparty_url = models.URLField(max_length=500, blank=True)
    counterparty_name = models.CharField(max_length=200, blank=True)
    context_id = models.CharField(max_length=200, blank=True)
    task_id = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    task_state = models.CharField(max_length=32, blank=True, help_text="the last state stamped on the Task")
    turn_count = models.PositiveIntegerField(default=0)
    max_turns = models.PositiveIntegerField(default=10)
    objective = models.TextField(blank=True)
    guidance = models.JSONField(default=list, blank=True)
    parked_question = models.TextField(blank=True)
    # Each question the negotiation parked on and the party's answer to it, in order:
    # [{"question", "answer"}]. An ask never reaches the wire, so the record alone cannot show it.
    answers = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    batch = models.ForeignKey(
        Batch, null=True, blank=True, on_delete=models.SET_NULL, related_name="negotiations"
    )
    event = models.JSONField(null=True, blank=True, help_text="the event last reported to the batch")
    # What the agent's chat model spent deciding our moves, failed decisions included.
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    # Turns recorded, both sides' (turn_count is ours alone, against the cap): counted by
    # negotiations.services.recording.add_turn as it writes each, so the board orders by it from an index.
    turns_recorded = models.PositiveIntegerField(default=0)
    # The deal's score for our side (negotiations.score.Score), fixed when the settlement is recorded
    # (recording.settlement_save); null without a deal on a value, a limit, or (share) an aspiration.
    surplus = models.FloatField(null=True, blank=True)
    share = models.FloatField(null=True, blank=True)
    # Outbound: the move decided and not yet recorded, stored before it is sent so that every
    # attempt sends exactly it: {"message": the A2A 1.0 JSON Message, "usage": {"model",
    # "input_tokens", "output_tokens", "cost"}} (what deciding it cost). Cleared when recorded.
    outbound_move = models.JSONField(null=True, blank=True)
    # The counterparty as its card states it, when the card declares our settlement-signature
    # extension: {"name", "partyId", "jwks"} (negotiations.receipts.identity); null when it does not.
    counterparty_identity = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # The board's and the API's orders, newest first, whole or by status, and the board's by cost
        # either way (newest first among equals): read a page from the index and stop, however many
        # the tenant holds.
        indexes = [
            models.Index(fields=["tenant", "-created_at", "-id"], name="negotiation_newest"),
            models.Index(fields=["tenant", "status", "-created_at", "-id"], name="negotiation_status_newest"),
            models.Index(fields=["tenant", "cost", "-created_at", "-id"], name="negotiation_cheapest"),
            models.Index(fields=["tenant", "-cost", "-created_at", "-id"], name="negotiation_costliest"),
            models.Index(
                fields=["tenant", "turns_recorded", "-created_at", "-id"], name="negotiation_fewest_turns"
            ),
            models.Index(
                fields=["tenant", "-turns_recorded", "-created_at", "-id"], name="negotiation_most_turns"
            ),
            # The board's counts, all and settled, of the agents a member sees: read from the index alone.
            models.Index(fields=["tenant", "agent", "status"], name="negotiation_agent_status"),
            # By surplus and share, those without one last either way: on Postgres only, where
            # migration 0010 makes them (its score_indexes); SQLite
            # cannot index NULLS LAST, and the embedded default sorts its few rows without them.
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "direction", "task_id"],
                condition=~models.Q(task_id=""),
                name="one_negotiation_per_task",
            )
        ]

    def __str__(self) -> str:
        return f"{self.direction} {self.pk} ({self.status})"


class Turn(TenantOwnedModel):
    """One move, in order: ours or theirs, as it went over the wire."""

    class Side(models.TextChoices):
        OURS = "ours"
        THEIRS = "theirs"

    negotiation = models.ForeignKey(Negotiation, on_delete=models.CASCADE, related_name="turns")
    seq = models.PositiveIntegerField()
    side = models.CharField(max_length=8, choices=Side.choices)
    action = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    terms = models.JSONField(null=True, blank=True)
    offer_id = models.CharField(max_length=64, blank=True)
    accepts_offer_id = models.CharField(max_length=64, blank=True)
    raw = models.JSONField(default=dict, help_text="the A2A Message as JSON")
    artifact = models.JSONField(null=True, blank=True, help_text="what the evaluation hook attached")
    task_state = models.CharField(max_length=32, blank=True)
    # What deciding this move cost (ours only; "" and zeros for theirs and for ``offline``).
    model = models.CharField(max_length=200, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=6, default=0)

    class Meta:
        ordering = ["seq"]
        constraints = [models.UniqueConstraint(fields=["negotiation", "seq"], name="one_turn_per_seq")]


class Settlement(TenantOwnedModel):
    """The verdict on a closed exchange. A settled negotiation stays settled."""

    class Outcome(models.TextChoices):
        AGREED = "agreed"
        DECLINED = "declined"
        CONFLICT = "conflict"
        UNCONFIRMED = "unconfirmed"
        UNANSWERED = "unanswered"

    # Outcomes that close the exchange as a deal, which stands: its intent takes no new negotiation
    # with that counterparty, nor any inbound one (docs/design.md#one-live-negotiation;
    # negotiations.selectors.binding).
    DEALS = (Outcome.AGREED, Outcome.UNCONFIRMED)

    class Basis(models.TextChoices):
        PROSE = "prose"
        STATE = "state"
        TERMS = "terms"
        REFERENCE = "reference"

    negotiation = models.OneToOneField(Negotiation, on_delete=models.CASCADE, related_name="settlement")
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    basis = models.CharField(max_length=16, choices=Basis.choices)
    terms = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True)
    ended_by = models.CharField(max_length=8, choices=Turn.Side.choices, blank=True)
    disputed = models.JSONField(null=True, blank=True)

    class Signature(models.TextChoices):
        """Whether an agreed settlement is signed by both sides (docs/settlement-signatures.md)."""

        COUNTERSIGNED = "countersigned"
        NOT_OFFERED = "not_offered", "not offered by them"
        UNSIGNED = "unsigned", "not signed by us"
        MISSING = "missing", "no signature of theirs"
        DIFFERS = "differs", "signed settlements differ"
        INVALID = "invalid", "their signature does not hold"

    # "" while the outcome is not agreed (nothing to sign).
    signature = models.CharField(max_length=16, choices=Signature.choices, blank=True)
    signature_reason = models.TextField(blank=True, help_text="why the settlement is not countersigned")
    # The canonical settlement (negotiations.receipts.canonical_settlement) and each side's
    # compact JWS over it; "" for a side that sent none.
    signed_settlement = models.JSONField(null=True, blank=True)
    our_signature = models.TextField(blank=True)
    their_signature = models.TextField(blank=True)

    class Meta:
        # The API's list, newest first: a page from the index, however many the tenant holds.
        indexes = [models.Index(fields=["tenant", "-created_at", "-id"], name="settlement_newest")]


# RFC 9110 §5.1: a field name is a token.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_LINE_BREAK = re.compile(r"[\r\n]")
# Headers our client writes itself: a credential in one would be dropped or break the request.
_OWN_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "a2a-version",
        "a2a-extensions",
    }
)


class CounterpartyCredential(TenantOwnedModel):
    """What our client presents when it calls a counterparty whose URL starts with ``url_prefix``.

    ``agent`` None: for every agent of the tenant. ``scheme`` ``bearer`` sends
    ``Authorization: Bearer <secret>``; ``api_key`` sends ``<header>: <secret>``.
    """

    class Scheme(models.TextChoices):
        BEARER = "bearer"
        API_KEY = "api_key"

    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="counterparty_credentials"
    )
    url_prefix = models.URLField(max_length=500)
    scheme = models.CharField(max_length=8, choices=Scheme.choices, default=Scheme.BEARER)
    header = models.CharField(max_length=100, default="X-API-Key")
    secret = EncryptedCharField(max_length=500)

    def __str__(self) -> str:
        return self.url_prefix

    def clean(self) -> None:
        """Refuse what cannot be sent or would go astray: a URL prefix that is not http(s), a header
        name that is not an HTTP token (or is one the client sets itself), a secret that cannot be a
        header value (a line break, a character outside Latin-1), or an agent of another tenant."""
        errors: dict[str, str] = {}
        if urlsplit(self.url_prefix).scheme.lower() not in ("http", "https"):
            errors["url_prefix"] = "Give an http or https URL."
        if self.scheme == self.Scheme.API_KEY:
            if not _HEADER_NAME.fullmatch(self.header or ""):
                errors["header"] = "Give an HTTP header name: letters, digits and -, no spaces."
            elif self.header.lower() in _OWN_HEADERS:
                errors["header"] = f"{self.header} is a header the client sets itself; name another."
        if _LINE_BREAK.search(self.secret) or not self.secret.isprintable():
            errors["secret"] = "A secret is sent as a header value: no line breaks or control characters."
        else:
            try:
                self.secret.encode("latin-1")
            except UnicodeEncodeError:
                errors["secret"] = "A secret is sent as a header value: Latin-1 characters only."
        agent = self.agent if self.agent_id is not None else None
        if agent is not None and agent.tenant_id != self.tenant_id:
            errors["agent"] = "That agent belongs to another tenant."
        if errors:
            raise ValidationError(errors)
