"""Agents, what they work on, and the record of every run: the agent loop's data."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from parley.models import TenantOwnedModel

DEFAULT_ACTIONS: list[dict[str, object]] = [
    {"name": "propose", "description": "put an offer on the table", "terminal": False, "state": ""},
    {
        "name": "counter",
        "description": "answer an offer with another",
        "terminal": False,
        "state": "",
    },
    {
        "name": "accept",
        "description": "accept an offer on the table",
        "terminal": True,
        "state": "completed",
    },
    {"name": "reject", "description": "end without a deal", "terminal": True, "state": "rejected"},
]


def default_actions() -> list[dict[str, object]]:
    return [dict(a) for a in DEFAULT_ACTIONS]


class Agent(TenantOwnedModel):
    """One party's agent: its identity, its instructions and its limits.

    ``terms`` describes the structured terms the agent negotiates over ("" means
    prose only). ``allowed_actions`` is a list of ActionSpec dicts
    ``{name, description, terminal, state}``. ``term_guards`` is a list of
    ``{term, op, value}`` hard limits (``op`` one of ``<=``, ``>=``, ``==``,
    ``in`` with a list value; optional ``currency``, and ``aspiration``, the
    offline negotiator's opening value) checked in code on every outgoing
    move; an intent may add its own.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=63)
    name = models.CharField(max_length=200)
    party_id = models.CharField(max_length=500, blank=True, help_text="DID, profile URL or account id")
    description = models.TextField(blank=True)
    version = models.CharField(max_length=32, default="1.0.0")
    system_prompt = models.TextField(blank=True)
    terms = models.TextField(blank=True, default="amount (number)")
    allowed_actions = models.JSONField(default=default_actions)
    term_guards = models.JSONField(default=list, blank=True)

    class Strategy(models.TextChoices):
        """The offline negotiator's concession strategy (time-dependent, or tit-for-tat)."""

        BOULWARE = "boulware", "Boulware (holds firm, concedes late)"
        LINEAR = "linear", "Linear"
        CONCEDER = "conceder", "Conceder (concedes early)"
        TIT_FOR_TAT = "tit_for_tat", "Tit for tat (mirrors the counterparty's concessions)"

    model = models.CharField(max_length=200, default="offline")
    strategy = models.CharField(max_length=16, choices=Strategy.choices, default=Strategy.BOULWARE)
    turn_timeout = models.FloatField(
        default=180.0, help_text="seconds a counterparty may take to answer one move"
    )
    evaluation_url = models.URLField(
        max_length=500, blank=True, help_text="host hook that attaches an Artifact to each turn"
    )
    max_steps = models.PositiveIntegerField(default=10)
    max_turns = models.PositiveIntegerField(default=10)
    timezone = models.CharField(max_length=64, default="UTC")
    principal = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "slug"], name="agent_slug_per_tenant")]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.slug}"


class Intent(TenantOwnedModel):
    """What an agent is working on. Its messages form one conversation thread."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="intents")
    statement = models.TextField()
    external_id = models.CharField(max_length=200, blank=True)
    term_guards = models.JSONField(
        default=list, blank=True, help_text="hard limits for this intent, added to the agent's"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "external_id"],
                condition=~models.Q(external_id=""),
                name="intent_external_id_per_agent",
            )
        ]

    def __str__(self) -> str:
        return self.statement[:60]


class Run(TenantOwnedModel):
    """One call of the agent loop on an (agent, intent) thread."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        NEEDS_INPUT = "needs_input"
        WAITING = "waiting"
        DONE = "done"
        MAX_STEPS = "max_steps"
        FAILED = "failed"
        CANCELLED = "cancelled"

    ACTIVE = (Status.QUEUED, Status.RUNNING, Status.NEEDS_INPUT, Status.WAITING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="runs")
    intent = models.ForeignKey(Intent, on_delete=models.CASCADE, related_name="runs")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    end_reason = models.TextField(blank=True)
    output = models.TextField(blank=True)
    step_count = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.status})"


class Message(TenantOwnedModel):
    """One entry of a thread's conversation, in order (``seq`` per intent).

    Shapes follow chat completions: ``tool_calls`` is a list of
    ``{id, name, arguments}`` (``arguments`` the raw JSON string the model wrote).
    """

    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"

    intent = models.ForeignKey(Intent, on_delete=models.CASCADE, related_name="messages")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField()
    step = models.PositiveIntegerField(default=0, help_text="the run step that wrote it; 0 = input")
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    name = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["seq"]
        constraints = [
            models.UniqueConstraint(fields=["intent", "seq"], name="message_seq_per_thread"),
            models.UniqueConstraint(
                fields=["run", "tool_call_id"],
                condition=models.Q(role="tool"),
                name="one_result_per_tool_call",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role}#{self.seq}"


class Question(TenantOwnedModel):
    """A suspended tool call waiting on the party. It is answered at most once."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="questions")
    tool_call_id = models.CharField(max_length=200)
    question = models.TextField()
    options = models.JSONField(default=list, blank=True)
    answer = models.TextField(blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="one_question_per_tool_call")
        ]

    @property
    def is_open(self) -> bool:
        return self.answered_at is None

    def __str__(self) -> str:
        return self.question[:60]
