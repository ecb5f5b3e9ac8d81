"""The a2a-sdk Task store, per agent, in Postgres."""

from __future__ import annotations

from django.db import models

from agents.models import Agent
from parley.encryption import EncryptedJSONField, EncryptedTextField
from parley.models import TenantOwnedModel

# The length of a task or context id column, here and in negotiations.models.Negotiation.
ID_LENGTH = 200


class A2ATask(TenantOwnedModel):
    """One A2A Task as a2a-sdk sees it, stored as its protobuf JSON.

    ``owner`` is the caller's partition (:func:`a2a_gateway.store.owner_of`);
    another owner asking for the task is told it does not exist.
    """

    task_id = models.CharField(max_length=ID_LENGTH, primary_key=True)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="a2a_tasks")
    owner = models.CharField(max_length=500, db_index=True)
    context_id = models.CharField(max_length=ID_LENGTH, db_index=True)
    state = models.CharField(max_length=32)
    status_timestamp = models.DateTimeField(null=True, blank=True)
    data = models.JSONField()

    class Meta:
        ordering = ["-status_timestamp", "-task_id"]


class InboundKey(TenantOwnedModel):
    """A credential a counterparty presents to one agent's endpoint (as an API key or a bearer token).

    Shown once as ``<prefix>.<secret>``; only a hash of the secret is kept.
    Tasks a caller makes belong to its key: another caller asking for them is
    told they do not exist.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="inbound_keys")
    name = models.CharField(max_length=200, help_text="who holds it")
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=128)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix})"


class SigningKey(TenantOwnedModel):
    """A tenant's key for signing its agents' cards (ES256, JWS per the A2A spec's signed cards)."""

    kid = models.CharField(max_length=64, unique=True)
    private_pem = EncryptedTextField()
    public_jwk = models.JSONField()
    active = models.BooleanField(default=True)

    def __str__(self) -> str:
        return self.kid


class PushConfig(TenantOwnedModel):
    """A push-notification config a caller set on one of its tasks (A2A TaskPushNotificationConfig)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="push_configs")
    owner = models.CharField(max_length=500, db_index=True)
    task_id = models.CharField(max_length=ID_LENGTH, db_index=True)
    config_id = models.CharField(max_length=ID_LENGTH)
    data = EncryptedJSONField(help_text="the config as protobuf JSON (its token and credentials)")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "task_id", "config_id"], name="one_push_config_per_id")
        ]


class InboundContext(TenantOwnedModel):
    """One caller's conversation (A2A contextId) with an agent: its turns, and when it was last used."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="inbound_contexts")
    owner = models.CharField(max_length=500)
    context_id = models.CharField(max_length=ID_LENGTH)
    turns = models.PositiveIntegerField(default=0)
    last_used_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "owner", "context_id"], name="one_inbound_context")
        ]
        # The agent's contexts by recency: a new one forgets those beyond max_contexts (a2a_gateway.caps).
        indexes = [models.Index(fields=["agent", "last_used_at", "id"], name="inbound_context_recency")]
