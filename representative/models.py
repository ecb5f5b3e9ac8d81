"""The representative face's rows: the public text it answers visitors from, the requests they
leave with it, and the model usage of its answers."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from agents.models import Agent
from parley.models import TenantOwnedModel


class GroundingDocument(TenantOwnedModel):
    """Public text about the agent's party that its representative face may answer from (only these)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="grounding_documents")
    title = models.CharField(max_length=200)
    text = models.TextField()

    class Meta:
        ordering = ["title"]

    def __str__(self) -> str:
        return self.title


class IntakeRequest(TenantOwnedModel):
    """A request a visitor left with the agent's intake tool, for the agent's fixed recipient."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="intake_requests")
    caller = models.CharField(max_length=500, help_text="the task owner that left it")
    summary = models.CharField(max_length=500)
    details = models.TextField(blank=True)
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    notified_at = models.DateTimeField(null=True, blank=True)
    notify_error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.summary[:60]


class ModelUsage(TenantOwnedModel):
    """Model tokens and cost spent outside runs: a visitor's turn answered by the agent's chat model.

    Runs keep their own (``agents.Run.cost``); the tenant's monthly budget adds both.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=6, default=0)

    class Meta:
        indexes = [models.Index(fields=["tenant", "created_at"])]
