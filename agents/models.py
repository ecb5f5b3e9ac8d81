"""Agents, what they work on, and the record of every run: the agent loop's data."""

from __future__ import annotations

import uuid
from decimal import Decimal
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinValueValidator,
    RegexValidator,
)
from django.db import models

from parley import outbound
from parley.encryption import EncryptedCharField
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


# The built-in model's name (agents.llm.model_for): an endpoint of that name could never be used.
OFFLINE = "offline"
# A tool or model call runs inside one run step, which Celery stops at 300 s (agents.tasks); a
# longer timeout would never end the call with its own error.
MAX_CALL_TIMEOUT = 240.0
# An inbound turn holds the counterparty's request, and a concurrency slot, this long at most.
MAX_TURN_TIMEOUT = 3600.0


def entry_error(
    message: str, *, index: int, field: str, problem: str, code: str = "invalid"
) -> ValidationError:
    """A check's error about one entry of a JSON list setting (a guardrail, a term guard).

    ``message`` says it whole, naming the entry, as the host API and the admin show it; ``index``
    (the entry's 0-based position in the list), ``field`` (its key at fault, "" for the entry as a
    whole) and ``problem`` (what ``message`` says of it, without naming the entry) let the
    operator's row editors show it at that row and field (:func:`entry_of`).
    """
    # The message travels in params: used as the template, a "%" in the operator's text would break it.
    params = {"message": message, "entry": index, "entry_field": field, "problem": problem}
    return ValidationError("%(message)s", code=code, params=params)


def entry_of(error: ValidationError) -> tuple[int, str, str] | None:
    """``(index, field, problem)`` of an :func:`entry_error`; None for any other error."""
    params = error.params if isinstance(error.params, dict) else {}
    if "entry" not in params:
        return None
    return int(params["entry"]), str(params["entry_field"]), str(params["problem"])


def default_actions() -> list[dict[str, object]]:
    return [dict(a) for a in DEFAULT_ACTIONS]


currency_validator = RegexValidator(
    r"^[A-Z]{3}\Z", "A currency is three capital letters, its ISO 4217 code: EUR, USD, GBP."
)
# The system prompt is sent with every step of every run: a book's worth (about 25,000 tokens) is
# already more than a prompt needs, and far below what a form may send (DATA_UPLOAD_MAX_MEMORY_SIZE).
SYSTEM_PROMPT_MAX_LENGTH = 100_000
tool_name_validator = RegexValidator(
    r"^[A-Za-z0-9_-]{1,64}$", "A tool name is 1 to 64 letters, digits, '_' or '-' (chat completions' rule)."
)


class Tool(TenantOwnedModel):
    """A tool an agent can offer its model.

    ``parameters`` is the JSON Schema of its arguments, handed to the model
    verbatim and checked before the tool runs. ``kind`` says how it runs:

    * ``builtin`` — one of the platform's own tools, by ``name`` (``ask_user``,
      ``negotiate``, ``answer``);
    * ``host`` — an HTTPS POST of the arguments to ``url``, signed with
      ``secret`` (see :mod:`agents.host_operations`), within ``timeout`` seconds;
    * ``agent`` — runs ``target_agent``'s loop on the arguments and returns its
      final text.

    ``suspends`` hands the arguments to the party and stops the run until they
    answer; ``requires_approval`` stops it until the party approves (the tool
    then runs with the original arguments) or rejects.
    """

    class Kind(models.TextChoices):
        BUILTIN = "builtin", "Built in"
        HOST = "host", "Host operation (HTTPS)"
        AGENT = "agent", "Another agent"

    name = models.CharField(max_length=64, validators=[tool_name_validator])
    description = models.TextField()
    parameters = models.JSONField(default=dict, blank=True, help_text="JSON Schema of the arguments")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    # Every URL the platform calls is http(s) and, outside the embedded default, public (parley.outbound):
    # URLField's own validator also takes ftp:// and ftps://.
    url = models.URLField(max_length=500, blank=True, validators=[outbound.url_validator])
    secret = EncryptedCharField(max_length=200, blank=True, help_text="HMAC-SHA256 key for the body")
    timeout = models.FloatField(
        default=10.0,
        validators=[MinValueValidator(0.1), MaxValueValidator(MAX_CALL_TIMEOUT)],
        help_text="seconds",
    )
    target_agent = models.ForeignKey(
        "Agent", null=True, blank=True, on_delete=models.CASCADE, related_name="offered_as"
    )
    suspends = models.BooleanField(default=False)
    requires_approval = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="tool_name_per_tenant")]

    def __str__(self) -> str:
        return self.name


# Every field of an Agent an operator sets, in the order the editor shows them: the dashboard's
# form and the host API's serializer both offer exactly these.
AGENT_SETTINGS = (
    "name",
    "slug",
    "party_id",
    "description",
    "version",
    "principal",
    "timezone",
    "host_name",
    "system_prompt",
    "terms",
    "allowed_actions",
    "term_guards",
    "strategy",
    "max_turns",
    "turn_timeout",
    "evaluation_url",
    "model",
    "fallback_models",
    "max_steps",
    "history",
    "history_window",
    "on_busy",
    "guardrails",
    "tools",
    "inbound_auth",
    "max_concurrency",
    "max_input_chars",
    "max_turns_per_context",
    "max_contexts",
    "rate_limit",
    "cors_origins",
    "try_again_text",
    "publish_tools",
    "card_skills",
    "card_fields",
    "intake_owner",
)


class Agent(TenantOwnedModel):
    """One party's agent: its identity, its instructions and its limits.

    ``terms`` describes the structured terms the agent negotiates over ("" means
    prose only); written as "name (type, unit), name" it declares them, and its
    card publishes them and inbound moves are checked against them (the format
    and the rules: docs/move-rules.md). ``allowed_actions`` is a list of ActionSpec dicts
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
    system_prompt = models.TextField(
        blank=True,
        validators=[
            MaxLengthValidator(
                SYSTEM_PROMPT_MAX_LENGTH,
                message="A system prompt has at most %(limit_value)d characters; "
                "this one has %(show_value)d.",
            )
        ],
    )
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
        default=180.0,
        validators=[MinValueValidator(0.1), MaxValueValidator(MAX_TURN_TIMEOUT)],
        help_text="seconds a counterparty may take to answer one move",
    )
    evaluation_url = models.URLField(
        max_length=500,
        blank=True,
        validators=[outbound.url_validator],
        help_text="host hook that attaches an Artifact to each turn (http or https)",
    )
    fallback_models = models.JSONField(
        default=list, blank=True, help_text="model names tried in order once the primary's attempts are spent"
    )
    tools = models.ManyToManyField(
        Tool,
        blank=True,
        related_name="agents",
        help_text="the tools a run offers; none chosen means the defaults (ask_user, negotiate, answer)",
    )
    guardrails = models.JSONField(
        default=list,
        blank=True,
        help_text="list of {name, stage: input|output, action: block|redact, match: email|phone|regex, "
        "pattern?}",
    )

    class History(models.TextChoices):
        """How much of the thread a step sends the model."""

        APPEND_ONLY = "append_only", "Whole thread"
        WINDOW = "window", "Last N exchanges"

    history = models.CharField(max_length=16, choices=History.choices, default=History.APPEND_ONLY)
    history_window = models.PositiveIntegerField(default=20, validators=[MinValueValidator(1)])

    class OnBusy(models.TextChoices):
        """What starting a run does while another run of the same thread is active."""

        REFUSE = "refuse", "Refuse the new run"
        QUEUE = "queue", "Queue it behind the active run"

    on_busy = models.CharField(max_length=8, choices=OnBusy.choices, default=OnBusy.REFUSE)
    # Every cap takes at least one: a cap of 0 leaves the agent nothing to do (caps.py: "takes nothing").
    max_steps = models.PositiveIntegerField(default=10, validators=[MinValueValidator(1)])
    max_turns = models.PositiveIntegerField(default=10, validators=[MinValueValidator(1)])
    timezone = models.CharField(max_length=64, default="UTC")

    # The public A2A endpoint (a2a_gateway): who may call it, what its card says, and its caps.
    class InboundAuth(models.TextChoices):
        ANONYMOUS = "anonymous", "Anyone"
        API_KEY = "api_key", "An API key (X-API-Key header)"
        BEARER = "bearer", "A bearer token (Authorization header)"

    inbound_auth = models.CharField(max_length=16, choices=InboundAuth.choices, default=InboundAuth.ANONYMOUS)
    publish_tools = models.BooleanField(default=False, help_text="list the agent's own tools as card skills")
    card_skills = models.JSONField(
        default=list,
        blank=True,
        help_text="AgentSkill dicts that replace the derived skills (empty: derived)",
    )
    card_fields = models.JSONField(
        default=dict, blank=True, help_text="card JSON merged over the derived card, last"
    )
    # Served only once proved (agents.services.host_names): until then several agents, of any
    # tenants, may claim the same name, so that no one can hold another's name by claiming it first.
    # Null, not "", is none (the API's and the data's since the name was unique).
    host_name = models.CharField(  # noqa: DJ001
        max_length=253,
        null=True,
        blank=True,
        help_text="a host name of its own (custom domain or subdomain): card and endpoint at its root, "
        "once proved",
    )
    host_name_token = models.CharField(
        max_length=64,
        blank=True,
        editable=False,
        help_text="the random token that proves the host name; a new one with each new host name",
    )
    host_name_verified_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="when the host name was proved; null: not yet, and it serves nothing",
    )
    # Enough that a burst of 20 counterparties at once is answered, not told to retry (bench/inbound.py
    # sends that many), and under a web process's A2A_TURN_THREADS (32), so that one busy agent leaves
    # threads for the process's other agents.
    max_concurrency = models.PositiveIntegerField(
        default=20,
        validators=[MinValueValidator(1)],
        help_text="inbound turns at once; more are told to retry",
    )
    max_input_chars = models.PositiveIntegerField(
        default=8000, validators=[MinValueValidator(1)], help_text="characters of text in one inbound message"
    )
    max_turns_per_context = models.PositiveIntegerField(
        default=50, validators=[MinValueValidator(1)], help_text="inbound messages in one context"
    )
    max_contexts = models.PositiveIntegerField(
        default=1000,
        validators=[MinValueValidator(1)],
        help_text="contexts kept per agent; the least recently used is forgotten first",
    )
    rate_limit = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1)], help_text="inbound messages per caller per minute"
    )
    cors_origins = models.JSONField(default=list, blank=True, help_text="browser origins allowed to call")
    try_again_text = models.CharField(
        max_length=500,
        default="I could not answer in time. Please try again in a moment.",
        help_text="the answer when a turn runs out of time",
    )
    intake_owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="who receives requests taken in by the intake tool (the fixed recipient)",
    )
    principal = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "slug"], name="agent_slug_per_tenant"),
            models.UniqueConstraint(
                fields=["host_name"],
                condition=models.Q(host_name_verified_at__isnull=False),
                name="agent_verified_host_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.slug}"


def agents_naming(tenant_id: int, model: str) -> list[Agent]:
    """The tenant's agents whose model or fallback models name ``model``, by name."""
    # Read in Python: the embedded default's SQLite has no JSON containment lookup.
    agents = Agent.objects.for_tenant(tenant_id).only("name", "model", "fallback_models").order_by("name")
    return [agent for agent in agents if agent.model == model or model in (agent.fallback_models or [])]


class ModelEndpoint(TenantOwnedModel):
    """An OpenAI-compatible chat-completions model an agent may name in ``Agent.model``.

    Prices are per million tokens, in ``currency``; ``attempts`` counts tries
    on timeouts, dropped connections, 429 and 5xx; ``timeout`` is seconds per
    request.
    """

    name = models.CharField(max_length=200, help_text="what Agent.model and fallback_models refer to")
    base_url = models.URLField(
        max_length=500, validators=[outbound.url_validator], help_text="e.g. https://api.openai.com/v1"
    )
    api_key = EncryptedCharField(max_length=500, blank=True)
    upstream_model = models.CharField(max_length=200, help_text="the model id sent to the endpoint")
    input_price = models.DecimalField(
        max_digits=12, decimal_places=6, default=Decimal(0), validators=[MinValueValidator(Decimal(0))]
    )
    output_price = models.DecimalField(
        max_digits=12, decimal_places=6, default=Decimal(0), validators=[MinValueValidator(Decimal(0))]
    )
    currency = models.CharField(max_length=3, default="USD", validators=[currency_validator])
    timeout = models.FloatField(
        default=120.0, validators=[MinValueValidator(0.1), MaxValueValidator(MAX_CALL_TIMEOUT)]
    )
    attempts = models.PositiveIntegerField(default=3, validators=[MinValueValidator(1)])

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="model_name_per_tenant")]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Refuse the built-in model's name and credentials in the base URL (the API key holds
        them). What other rows say of it (an agent's models priced in one currency) is judged by
        :func:`agents.configuration.full_clean`."""
        errors: dict[str, str] = {}
        if self.name == OFFLINE:
            errors["name"] = f"{OFFLINE!r} is the built-in model; choose another name."
        try:
            parts = urlsplit(self.base_url)
            credentials = parts.username is not None or parts.password is not None
        except ValueError:
            credentials = False  # not a URL: the field's own validator says so
        if credentials:
            errors["base_url"] = "Give the URL without user:password@; the API key is for credentials."
        if errors:
            raise ValidationError(errors)


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
        # Newest first: an agent's (the forms' selects), and the tenant's (the API's list).
        indexes = [
            models.Index(fields=["agent", "-created_at"], name="intent_agent_newest"),
            models.Index(fields=["tenant", "-created_at", "-id"], name="intent_newest"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "external_id"],
                condition=~models.Q(external_id=""),
                name="intent_external_id_per_agent",
            )
        ]

    def __str__(self) -> str:
        return self.statement[:60]


# How deep agents may call agents as tools (Run.parent chains), so a cycle of delegation cannot run away.
MAX_DELEGATION_DEPTH = 4


class Run(TenantOwnedModel):
    """One call of the agent loop on an (agent, intent) thread."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending (behind another run of the thread)"
        QUEUED = "queued"
        RUNNING = "running"
        NEEDS_INPUT = "needs_input"
        WAITING = "waiting"
        DONE = "done"
        MAX_STEPS = "max_steps"
        FAILED = "failed"
        CANCELLED = "cancelled"

    # A run takes steps only while stepping; awaiting, it waits on the party or on a tool; once
    # ended, it takes no step, answer or tool result again. Active: not ended, nor pending.
    STEPPING = (Status.QUEUED, Status.RUNNING)
    AWAITING = (Status.NEEDS_INPUT, Status.WAITING)
    ACTIVE = (*STEPPING, *AWAITING)
    ENDED = (Status.DONE, Status.MAX_STEPS, Status.FAILED, Status.CANCELLED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="runs")
    intent = models.ForeignKey(Intent, on_delete=models.CASCADE, related_name="runs")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    end_reason = models.TextField(blank=True)
    task = models.TextField(
        blank=True, default="", help_text="what the party asked; it enters the thread as the run starts"
    )
    output = models.TextField(blank=True)
    output_schema = models.JSONField(
        null=True, blank=True, help_text="JSON Schema the final answer must meet; it is then parsed"
    )
    output_data = models.JSONField(null=True, blank=True, help_text="the final answer, parsed and valid")
    step_count = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal(0))
    max_tokens = models.PositiveIntegerField(null=True, blank=True, help_text="input + output tokens")
    max_cost = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    parent_tool_call_id = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # The runs page's and the API's order: a page from the index, however many the tenant holds.
        indexes = [models.Index(fields=["tenant", "-created_at", "-id"], name="run_newest")]

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
    # The step's usage, on the assistant message that step wrote.
    model = models.CharField(max_length=200, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal(0))

    class Meta:
        ordering = ["seq"]
        constraints = [
            models.UniqueConstraint(fields=["intent", "seq"], name="message_seq_per_thread"),
            models.UniqueConstraint(
                fields=["run", "step"],
                condition=models.Q(role="assistant"),
                name="one_model_reply_per_step",
            ),
            models.UniqueConstraint(
                fields=["run", "tool_call_id"],
                condition=models.Q(role="tool"),
                name="one_result_per_tool_call",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role}#{self.seq}"


class Question(TenantOwnedModel):
    """A tool call waiting on the party. It is answered (or decided) at most once.

    A ``question`` comes from a ``suspends`` tool such as ``ask_user``: the
    answer is the call's result. An ``approval`` comes from a
    ``requires_approval`` tool: ``approved`` records the decision, ``answer``
    the reason given, ``arguments`` what the tool will run with, and ``tool_run_at`` when an
    approved tool that runs in a transaction ran.
    """

    class Kind(models.TextChoices):
        QUESTION = "question"
        APPROVAL = "approval"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="questions")
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.QUESTION)
    tool_call_id = models.CharField(max_length=200)
    tool_name = models.CharField(max_length=64, blank=True)
    arguments = models.JSONField(default=dict, blank=True)
    question = models.TextField()
    options = models.JSONField(default=list, blank=True)
    approved = models.BooleanField(null=True, blank=True)
    answer = models.TextField(blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    answered_at = models.DateTimeField(null=True, blank=True)
    # When an approved tool that runs inside a transaction was run, written in that transaction:
    # a second message for the approval (a duplicate, or the sweep's) finds it taken, even when the
    # tool's result comes later (a delegate, a negotiation). Host operations never set it.
    tool_run_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The inbox: the open ones, newest first (answered ones outnumber them as work goes on).
            models.Index(
                fields=["tenant", "-created_at", "-id"],
                condition=models.Q(answered_at=None),
                name="question_open_newest",
            ),
            # The API's lists of questions and of approvals, newest first.
            models.Index(fields=["tenant", "kind", "-created_at", "-id"], name="question_kind_newest"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="one_question_per_tool_call")
        ]

    @property
    def is_open(self) -> bool:
        return self.answered_at is None

    def __str__(self) -> str:
        return self.question[:60]
