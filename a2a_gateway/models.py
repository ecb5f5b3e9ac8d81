"""The a2a-sdk Task store, per agent, in Postgres."""

from __future__ import annotations

from django.db import models

from agents.models import Agent
from parley.models import TenantOwnedModel

# The length of a task or context id column, here and in negotiations.models.Negotiation.
ID_LENGTH = 200


class A2ATask(TenantOwnedModel):
    """One A2A Task as a2a-sdk sees it, stored as its protobuf JSON.

    ``owner`` is the partition the SDK's owner resolver names; another owner
    asking for the task is told it does not exist.
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
