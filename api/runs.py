"""The host's work through the API: runs (start, read with their steps, cancel), the questions runs
ask the party (answer) and the tool calls waiting for its approval (approve, reject).

``/api/v1/runs``, ``/api/v1/questions`` and ``/api/v1/approvals``. GETs need the ``read`` scope,
POSTs ``write``. The host acts as itself: services are called with ``user=None``, and what it
answered or decided shows ``answered_by``/``decided_by`` null.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any, get_args

import django_filters
from django.db import models
from django.db.models import Q, QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agents import selectors
from agents.forms import MAX_TEXT
from agents.models import Agent, Intent, Message, Question, Run
from agents.selectors import ToolCallShown
from agents.services import questions, runs
from api.base import TenantViewSet
from api.configuration import JSONObjectField
from api.errors import Conflict
from api.fields import TenantRowField, of_tenant
from negotiations.limits import Kind
from parley.models import Event

# Runs.


class RunStartSerializer(serializers.Serializer[Any]):
    """What ``POST /runs`` takes: exactly one of ``intent`` and ``statement``. A task or limit the
    agent cannot use is refused by the service that starts runs, as a 400 at the field it names."""

    agent = TenantRowField(
        model=Agent,
        help_text="The id of the agent to run.",
        error_messages={"does_not_exist": "This tenant has no agent with this id."},
    )
    intent = TenantRowField(
        model=Intent,
        required=False,
        allow_null=True,
        help_text="The id of one of the agent's intents: the thread the run continues. Or give `statement`.",
        error_messages={"does_not_exist": "This tenant has no intent with this id."},
    )
    statement = serializers.CharField(
        required=False,
        max_length=MAX_TEXT,
        help_text="A new intent for the run to start, in the party's words. Or give `intent`.",
    )
    task = serializers.CharField(
        max_length=MAX_TEXT, help_text="What the party asks: the run's first message."
    )
    output_schema = JSONObjectField(
        required=False,
        allow_null=True,
        help_text='A JSON Schema the final answer must meet ({"type": "object", …}); it is then parsed '
        "into `output_data`.",
    )
    max_tokens = serializers.IntegerField(
        required=False, allow_null=True, help_text="Input and output tokens together, at most."
    )
    max_cost = serializers.DecimalField(
        max_digits=14,
        decimal_places=6,
        required=False,
        allow_null=True,
        help_text="The most the run may cost, in the currency of the agent's model endpoint.",
    )
    deadline = serializers.DateTimeField(
        required=False, allow_null=True, help_text="When the run fails if it has not ended."
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        given = data.get("intent") is not None, bool(data.get("statement"))
        if given == (True, True):
            message = "Give intent or statement, not both."
        elif given == (False, False):
            message = "Give intent (an existing intent's id) or statement (a new intent)."
        else:
            return data
        raise serializers.ValidationError({"intent": [message], "statement": [message]})


class UsageSerializer(serializers.ModelSerializer[Run]):
    class Meta:
        model = Run
        fields = ["input_tokens", "output_tokens", "cost"]


class LimitsSerializer(serializers.ModelSerializer[Run]):
    class Meta:
        model = Run
        fields = ["max_tokens", "max_cost", "deadline"]


class RunSerializer(serializers.ModelSerializer[Run]):
    """A run without its steps. ``usage.cost`` and ``limits.max_cost`` are decimal strings in the
    currency of the agent's model endpoint; ``parent`` is the run that called this one as a tool."""

    usage = UsageSerializer(source="*", read_only=True)
    limits = LimitsSerializer(source="*", read_only=True)

    class Meta:
        model = Run
        fields = [
            "id",
            "agent",
            "intent",
            "parent",
            "status",
            "end_reason",
            "task",
            "output",
            "output_schema",
            "output_data",
            "step_count",
            "usage",
            "limits",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class ModelCallSerializer(serializers.ModelSerializer[Message]):
    """The model's reply that made a step: its text, the model that wrote it, and what it cost."""

    class Meta:
        model = Message
        fields = ["model", "content", "input_tokens", "output_tokens", "cost", "created_at"]


# The kinds of a failed try of a model call (the run.retry and run.fallback events, less "run.").
ATTEMPT_KINDS = [("retry", "retry"), ("fallback", "fallback")]
# A limit's kinds (negotiations.limits.Kind): the most the party pays, or the least it takes.
LIMIT_KINDS = [(kind, kind) for kind in get_args(Kind)]


class AttemptSerializer(serializers.Serializer[Event]):
    """A failed try of a step's model call: a ``retry`` of ``model`` after ``wait`` seconds, or a
    ``fallback`` from ``from_model`` to ``to_model``; the fields of the other kind are null."""

    kind = serializers.SerializerMethodField()
    model = serializers.CharField(source="payload.model", allow_null=True)
    attempt = serializers.IntegerField(source="payload.attempt", allow_null=True)
    wait = serializers.FloatField(source="payload.wait", allow_null=True)
    from_model = serializers.CharField(source="payload.from", allow_null=True)
    to_model = serializers.CharField(source="payload.to", allow_null=True)
    reason = serializers.CharField(source="payload.reason", allow_null=True)
    created_at = serializers.DateTimeField()

    @extend_schema_field(serializers.ChoiceField(choices=ATTEMPT_KINDS))
    def get_kind(self, event: Event) -> str:
        return event.kind.removeprefix("run.")


class AnsweredSerializer(serializers.ModelSerializer[Question]):
    """The question or approval a tool call stopped the run for, and what came of it."""

    answered_by = serializers.CharField(
        source="answered_by.username",
        allow_null=True,
        help_text="Who answered or decided; null for the host through its API (or a member since removed).",
    )

    class Meta:
        model = Question
        fields = ["id", "kind", "question", "answer", "approved", "answered_by", "answered_at", "created_at"]


class ToolCallSerializer(serializers.Serializer[ToolCallShown]):
    """One tool call of a step: ``arguments`` is the JSON text the model wrote; ``result`` the call's
    result (null while it waits); ``question`` the question or approval it stopped for; ``child_run``
    the run it started when the tool is another agent."""

    id = serializers.CharField()
    name = serializers.CharField()
    arguments = serializers.CharField()
    result = serializers.CharField(source="result.content", allow_null=True)
    result_at = serializers.DateTimeField(source="result.created_at", allow_null=True)
    question = AnsweredSerializer(allow_null=True)
    child_run = serializers.UUIDField(source="child.pk", allow_null=True)


class NoteSerializer(serializers.ModelSerializer[Message]):
    """Any other message of a step: the task (step 0), what was sent back to the model."""

    class Meta:
        model = Message
        fields = ["role", "name", "content", "created_at"]


class StepSerializer(serializers.Serializer[Any]):
    """Step ``number`` of a run (0: its task): the model call that made it and what it wrote."""

    number = serializers.IntegerField()
    model_call = ModelCallSerializer(source="reply", allow_null=True)
    attempts = AttemptSerializer(many=True)
    tool_calls = ToolCallSerializer(source="calls", many=True)
    notes = NoteSerializer(many=True)


class WaitingSerializer(serializers.ModelSerializer[Question]):
    """A question or approval waiting on the party: answer it at ``/questions/{id}/answer``, decide it
    at ``/approvals/{id}/approve`` or ``/reject``, as its ``kind`` says."""

    class Meta:
        model = Question
        fields = ["id", "kind", "tool_name", "question", "options", "arguments", "created_at"]


class RunDetailSerializer(RunSerializer):
    """A run with its steps (as the dashboard's run page shows them), the questions and approvals it
    waits on now (none once it ended), and ``currency``, that of its costs ("" when its model has no
    priced endpoint)."""

    currency = serializers.SerializerMethodField()
    steps = serializers.SerializerMethodField()
    open_questions = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "currency", "steps", "open_questions"]
        read_only_fields = fields

    def get_currency(self, run: Run) -> str:
        return selectors.agent_currency(agent=run.agent)

    @extend_schema_field(StepSerializer(many=True))
    def get_steps(self, run: Run) -> Any:
        return StepSerializer(selectors.run_steps(run=run), many=True).data

    @extend_schema_field(WaitingSerializer(many=True))
    def get_open_questions(self, run: Run) -> Any:
        waiting = selectors.run_questions(run=run).filter(selectors.OPEN_QUESTION)
        return WaitingSerializer(waiting, many=True).data


class RunFilter(django_filters.FilterSet):
    agent = django_filters.ModelChoiceFilter(
        queryset=of_tenant(Agent), help_text="Runs of this agent (its id)."
    )
    intent = django_filters.ModelChoiceFilter(
        queryset=of_tenant(Intent), help_text="Runs on this intent (its id)."
    )
    status = django_filters.ChoiceFilter(choices=Run.Status.choices, help_text="Runs in this status.")

    class Meta:
        model = Run
        fields = ["agent", "intent", "status"]


@extend_schema_view(
    list=extend_schema(summary="List runs, newest first"),
    retrieve=extend_schema(summary="Read a run with its steps", responses=RunDetailSerializer),
)
class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """The tenant's runs: start one, read it step by step, cancel it."""

    queryset = Run.objects.none()
    serializer_class = RunSerializer
    filterset_class = RunFilter

    def get_queryset(self) -> QuerySet[Run]:
        return Run.objects.for_tenant(self.tenant).select_related("agent")

    def get_serializer_class(self) -> type[serializers.BaseSerializer[Any]]:
        return RunSerializer if self.action == "list" else RunDetailSerializer

    @extend_schema(
        summary="Start a run",
        request=RunStartSerializer,
        responses={status.HTTP_201_CREATED: RunDetailSerializer},
        description="Starts a run of `agent` on `intent`, or on a new intent of `statement`, with `task` "
        "as its first message. It then steps in a worker. A task or limit the agent cannot use is a 400 "
        "naming it; a thread busy with another run is a 409 (unless the agent queues runs: the new one "
        "is then `pending`).",
    )
    def create(self, request: Request) -> Response:
        start = RunStartSerializer(data=request.data, context=self.get_serializer_context())
        start.is_valid(raise_exception=True)
        run = runs.run_start(**start.validated_data)
        return Response(RunDetailSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Cancel a run",
        request=None,
        responses=RunDetailSerializer,
        description="Cancels an active run: it takes no step, answer or tool result again; the runs it "
        "called are cancelled and its negotiations stop. A run that ended is a 409.",
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        run = runs.run_cancel(run=self.get_object(), user=None)
        return Response(RunDetailSerializer(self.get_queryset().get(pk=run.pk)).data)


# Questions and approvals.


class QuestionStatus(models.TextChoices):
    """Where a question or approval stands: ``open`` (it waits for an answer), ``answered`` (answered
    or decided) or ``closed`` (never answered, and its run ended: it takes none)."""

    OPEN = "open"
    ANSWERED = "answered"
    CLOSED = "closed"


QUESTION_STATUS_MATCH = {
    QuestionStatus.OPEN: selectors.OPEN_QUESTION,
    QuestionStatus.ANSWERED: Q(answered_at__isnull=False),
    QuestionStatus.CLOSED: Q(answered_at=None) & ~selectors.OPEN_QUESTION,
}


def question_status(question: Question) -> str:
    """The :class:`QuestionStatus` of ``question`` (its run loaded)."""
    if not question.is_open:
        return QuestionStatus.ANSWERED
    return QuestionStatus.OPEN if question.run.status in Run.ACTIVE else QuestionStatus.CLOSED


class AskedSerializer(serializers.ModelSerializer[Question]):
    """What questions and approvals share: the run's agent and intent, and where it stands."""

    agent = serializers.UUIDField(source="run.agent_id", read_only=True)
    intent = serializers.UUIDField(source="run.intent_id", read_only=True)
    status = serializers.SerializerMethodField()

    @extend_schema_field(serializers.ChoiceField(choices=QuestionStatus.choices))
    def get_status(self, question: Question) -> str:
        return question_status(question)


class QuestionSerializer(AskedSerializer):
    """A question a run asked the party (an ``ask_user`` call, or a host tool that ``suspends``, whose
    ``arguments`` it shows); the ``answer`` becomes the tool call's result."""

    answered_by = serializers.CharField(
        source="answered_by.username",
        allow_null=True,
        read_only=True,
        help_text="Who answered; null for the host through its API (or a member since removed).",
    )

    class Meta:
        model = Question
        fields = [
            "id",
            "run",
            "agent",
            "intent",
            "tool_name",
            "question",
            "options",
            "arguments",
            "status",
            "answer",
            "answered_by",
            "answered_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


DECISIONS = [("approved", "approved"), ("rejected", "rejected")]


class ApprovalSerializer(AskedSerializer):
    """A tool call (of a ``requires_approval`` tool) waiting for the party's approval: approving runs
    ``tool_name`` with ``arguments``; rejecting gives the model ``rejected: <reason>``."""

    decision = serializers.SerializerMethodField()
    reason = serializers.CharField(source="answer", read_only=True)
    decided_by = serializers.CharField(
        source="answered_by.username",
        allow_null=True,
        read_only=True,
        help_text="Who decided; null for the host through its API (or a member since removed).",
    )
    decided_at = serializers.DateTimeField(source="answered_at", allow_null=True, read_only=True)

    class Meta:
        model = Question
        fields = [
            "id",
            "run",
            "agent",
            "intent",
            "tool_name",
            "arguments",
            "question",
            "status",
            "decision",
            "reason",
            "decided_by",
            "decided_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=DECISIONS, allow_null=True))
    def get_decision(self, question: Question) -> str | None:
        if question.approved is None:
            return None
        return "approved" if question.approved else "rejected"


class UnderstoodLimitSerializer(serializers.Serializer[Any]):
    """The limit the agent read from the answer: on ``term``, a ``ceiling`` (the most the party pays)
    or a ``floor`` (the least it takes) of ``value`` in ``currency``, per ``unit`` ("" for none)."""

    term = serializers.CharField()
    kind = serializers.ChoiceField(choices=LIMIT_KINDS)
    value = serializers.FloatField()
    currency = serializers.CharField(allow_blank=True)
    unit = serializers.CharField(allow_blank=True)


class UnderstoodSerializer(serializers.Serializer[Any]):
    """What the agent understood of the party's answer as it was given (the ``offline`` negotiator
    reads the limit it asked for): ``message`` for people, ``limit`` the limit read, or null when
    the answer gives no usable one (``message`` says why, and the agent asks again)."""

    message = serializers.CharField()
    limit = UnderstoodLimitSerializer(allow_null=True)


def understood_data(understood: selectors.Understood | None) -> dict[str, Any] | None:
    """``understood`` as the API writes it (:class:`UnderstoodSerializer`), None as null."""
    if understood is None:
        return None
    return {"message": understood.message, "limit": understood.limit}


class AnsweredQuestionSerializer(QuestionSerializer):
    """A question as answered, with ``understood``: what the agent understood of the answer, or null
    where nothing reads it before the agent's model (a chat model, or no limit was asked for)."""

    understood = serializers.SerializerMethodField()

    class Meta(QuestionSerializer.Meta):
        fields = [*QuestionSerializer.Meta.fields, "understood"]
        read_only_fields = fields

    @extend_schema_field(UnderstoodSerializer(allow_null=True))
    def get_understood(self, question: Question) -> dict[str, Any] | None:
        return understood_data(self.context.get("understood"))


class AnswerSerializer(serializers.Serializer[Any]):
    answer = serializers.CharField(
        max_length=MAX_TEXT, help_text="The party's answer: the tool call's result."
    )


class DecisionSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=MAX_TEXT,
        help_text="Why; a rejection's reason is what the model is told.",
    )


class QuestionFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(
        choices=QuestionStatus.choices,
        method="filter_status",
        help_text="`open`: waits for an answer; `answered`; `closed`: never answered, its run ended. "
        "Without it, all.",
    )
    agent = django_filters.ModelChoiceFilter(
        field_name="run__agent", queryset=of_tenant(Agent), help_text="Those of this agent's runs (its id)."
    )
    run = django_filters.ModelChoiceFilter(queryset=of_tenant(Run), help_text="Those of this run (its id).")

    class Meta:
        model = Question
        fields = ["status", "agent", "run"]

    def filter_status(self, queryset: QuerySet[Question], name: str, value: str) -> QuerySet[Question]:
        return queryset.filter(QUESTION_STATUS_MATCH[QuestionStatus(value)])


def already_decided(refused: questions.QuestionAlreadyAnswered) -> str:
    """Why a question takes no answer (:meth:`questions.QuestionAlreadyAnswered.said`), when in UTC."""
    answered_at = refused.question.answered_at
    assert answered_at is not None
    return refused.said(when=answered_at.astimezone(UTC).isoformat())


class QuestionsBase(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """The tenant's questions of one ``kind``, newest first (see :class:`QuestionFilter`)."""

    kind: str
    queryset = Question.objects.none()
    filterset_class = QuestionFilter

    def get_queryset(self) -> QuerySet[Question]:
        return (
            Question.objects.for_tenant(self.tenant)
            .filter(kind=self.kind)
            .select_related("run", "answered_by")
        )

    def reread(self, question: Question) -> Question:
        return self.get_queryset().get(pk=question.pk)


@extend_schema_view(
    list=extend_schema(summary="List questions, newest first"),
    retrieve=extend_schema(summary="Read a question"),
)
class QuestionViewSet(QuestionsBase):
    """Questions runs asked the party; answering one resumes its run."""

    kind = Question.Kind.QUESTION
    serializer_class = QuestionSerializer

    @extend_schema(
        summary="Answer a question",
        request=AnswerSerializer,
        responses=AnsweredQuestionSerializer,
        description="Records the answer as the tool call's result and resumes the run (in a worker). "
        "`understood` says what the agent understood of it at once: the limit it read (an agent on the "
        "`offline` model that asked for one), or why the answer gives no usable limit, in which case "
        "it asks again; null where its model reads the answer itself. "
        "A question answered before is a 409 saying by whom and when; one whose run ended, a 409.",
    )
    @action(detail=True, methods=["post"])
    def answer(self, request: Request, pk: str | None = None) -> Response:
        question = self.get_object()
        body = AnswerSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            answered = questions.question_answer(
                question=question, answer=body.validated_data["answer"], user=None
            )
        except questions.QuestionAlreadyAnswered as exc:
            raise Conflict(already_decided(exc)) from exc
        context = {"understood": answered.understood}
        return Response(AnsweredQuestionSerializer(self.reread(question), context=context).data)


@extend_schema_view(
    list=extend_schema(summary="List approvals, newest first"),
    retrieve=extend_schema(summary="Read an approval"),
)
class ApprovalViewSet(QuestionsBase):
    """Tool calls waiting for the party's approval."""

    kind = Question.Kind.APPROVAL
    serializer_class = ApprovalSerializer

    def decide(self, request: Request, *, approve: bool) -> Response:
        approval = self.get_object()
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            questions.approval_decide(
                question=approval, approve=approve, reason=body.validated_data["reason"], user=None
            )
        except questions.QuestionAlreadyAnswered as exc:
            raise Conflict(already_decided(exc)) from exc
        return Response(ApprovalSerializer(self.reread(approval)).data)

    @extend_schema(
        summary="Approve a tool call",
        request=DecisionSerializer,
        responses=ApprovalSerializer,
        description="The tool then runs with the arguments shown, in a worker, and the run goes on. "
        "Decided before, or its run ended: a 409.",
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        return self.decide(request, approve=True)

    @extend_schema(
        summary="Reject a tool call",
        request=DecisionSerializer,
        responses=ApprovalSerializer,
        description="The model is told `rejected: <reason>` and the run goes on. Decided before, or "
        "its run ended: a 409.",
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        return self.decide(request, approve=False)
