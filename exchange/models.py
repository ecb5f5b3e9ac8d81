"""Agent Exchange rows: an agent's profile, the requests prepared for it, mandate uses, and our sends.

A prepared request holds the complete request — tokens and protected values
included — only until it is executed; then ``request`` is cleared and the
reference, the run it started and the receipt remain (docs/agent-exchange.md).
"""

from __future__ import annotations

from django.db import models

from agents.models import Agent, Run
from parley.encryption import EncryptedJSONField
from parley.models import TenantOwnedModel

REFERENCE_LENGTH = 50  # "sha256:" and 43 base64url characters
EXCHANGE_ID_LENGTH = 128


class ExchangeProfile(TenantOwnedModel):
    """An agent's Agent Exchange settings; an agent without one does not advertise the extension.

    ``mode`` ``required``: the card is dedicated to Agent Exchange (the extension is required and
    every message must activate it); ``optional``: a shared card, where negotiation still works.
    Delegation tokens and standing mandates are verified with the keys of ``jwks`` (a JSON Web Key
    Set, RFC 7517, that the operator configures): a token's ``iss`` must be ``issuer``, its ``aud``
    ``audience`` (blank: the agent's A2A URL) and its ``scope`` must include ``scope``.
    """

    class Mode(models.TextChoices):
        OPTIONAL = "optional"
        REQUIRED = "required"

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="exchange_profile")
    mode = models.CharField(max_length=8, choices=Mode.choices, default=Mode.OPTIONAL)
    issuer = models.CharField(max_length=500, help_text="the iss of the delegation tokens it accepts")
    audience = models.CharField(max_length=500, blank=True, help_text="blank: the agent's A2A URL")
    scope = models.CharField(max_length=200, default="agent-exchange", help_text="a scope tokens must carry")
    jwks = models.JSONField(help_text="JSON Web Key Set of the keys that sign tokens and mandates")

    def __str__(self) -> str:
        return f"Agent Exchange of {self.agent_id} ({self.mode})"


class PreparedExchange(TenantOwnedModel):
    """A complete request a caller prepared for one of our agents, found again by its reference.

    ``caller`` is the preparing caller's partition name (``key:<prefix>``): only that caller's
    A2A message may execute it. An ``exchange_id`` is prepared once per agent (a replay is
    refused). ``request`` is None once executed or refused for good (``refusal`` then says why).
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="prepared_exchanges")
    caller = models.CharField(max_length=500)
    exchange_id = models.CharField(max_length=EXCHANGE_ID_LENGTH)
    reference = models.CharField(max_length=REFERENCE_LENGTH)
    request = EncryptedJSONField(null=True, blank=True)
    expires_at = models.DateTimeField()
    executed_at = models.DateTimeField(null=True, blank=True)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    receipt = models.JSONField(null=True, blank=True)
    refusal = models.TextField(blank=True, help_text="why it was refused for good; its request is deleted")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "exchange_id"], name="exchange_id_once_per_agent"),
            models.UniqueConstraint(fields=["agent", "reference"], name="exchange_reference_once_per_agent"),
        ]

    def __str__(self) -> str:
        return f"{self.exchange_id} for agent {self.agent_id}"


class MandateUse(TenantOwnedModel):
    """How many times a standing mandate (its ``jti``) has authorised an exchange with one agent."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    mandate_id = models.CharField(max_length=200)
    uses = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "mandate_id"], name="mandate_once_per_agent")]


class OutboundExchange(TenantOwnedModel):
    """One request our agent sends to another agent's endpoint at ``url`` (docs/agent-exchange.md).

    ``request`` is None once it has been sent (the recipient holds it); ``reference`` stays.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        COMPLETED = "completed"
        FAILED = "failed"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="outbound_exchanges")
    url = models.URLField(max_length=500)
    exchange_id = models.CharField(max_length=EXCHANGE_ID_LENGTH)
    reference = models.CharField(max_length=REFERENCE_LENGTH)
    request = EncryptedJSONField(null=True, blank=True)
    prepared_by_host = models.BooleanField(
        default=False, help_text="the host delivered the request through its own trusted channel"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    receipt = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "exchange_id"], name="outbound_exchange_id_once_per_agent"
            )
        ]

    def __str__(self) -> str:
        return f"{self.exchange_id} to {self.url}"
