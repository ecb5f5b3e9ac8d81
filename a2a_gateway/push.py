"""Push notifications of the public endpoint: configs in Postgres, delivered to public addresses only.

A counterparty registers a webhook for one of its tasks (A2A 1.0
``CreateTaskPushNotificationConfig``, 0.3 ``tasks/pushNotificationConfig/set``,
or inline in ``SendMessage``); a2a-sdk then POSTs every event of the task to it
as a StreamResponse (A2A spec §4.3 "Push Notification Payload").

* :class:`DjangoPushConfigStore` keeps the configs in
  :class:`a2a_gateway.models.PushConfig`, owner-scoped like the task store
  (:func:`a2a_gateway.store.owner_of`): a caller sees and deletes only its own.
* :func:`url_allowed` is the handler's push URL policy: a URL whose host does
  not resolve to public addresses only is refused, -32602 "Invalid push
  notification URL" (spec §13 "Push Notification Security": SSRF).
* :class:`PushSender` delivers, in the background and in order per task,
  through :class:`PublicOnlyTransport`, which connects only to an address it
  has just vetted, so the policy holds at connect time too (DNS rebinding).

``A2A_PUSH_ALLOW_PRIVATE`` (default False) lets pushes go to private, loopback
and link-local addresses, for a receiver on loopback in tests.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging

import httpx
from a2a.server.context import ServerCallContext
from a2a.server.tasks import BasePushNotificationSender, PushNotificationConfigStore
from a2a.server.tasks.push_notification_config_store import normalize_push_notification_config
from a2a.server.tasks.push_notification_sender import PushNotificationEvent
from a2a.types import Task, TaskPushNotificationConfig
from a2a.utils.errors import InvalidParamsError
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.db.models import QuerySet
from google.protobuf.json_format import MessageToDict, ParseDict

from a2a_gateway.models import A2ATask, PushConfig
from a2a_gateway.store import call_agent, id_problem, owner_of
from negotiations.wire import nul_path
from parley import netguard

logger = logging.getLogger(__name__)

# Seconds to deliver one notification.
DELIVERY_TIMEOUT = 10.0
# Push configs one caller may set on one task.
MAX_CONFIGS_PER_TASK = 5


# The address policy is parley.netguard's, shared with the host's webhooks; a refusal's message names
# the host, never the URL.
PushURLRefused = netguard.URLRefused


async def vetted_address(url: str) -> str:
    """The address a push to ``url`` goes to (:func:`parley.netguard.vetted_address`), private ones
    allowed only with ``settings.A2A_PUSH_ALLOW_PRIVATE``.

    Raises:
        PushURLRefused: the URL is not http(s), its host does not resolve, or an
            address it resolves to is not public.
    """
    return await netguard.vetted_address(url, allow_private=settings.A2A_PUSH_ALLOW_PRIVATE)


async def url_allowed(url: str) -> bool:
    """a2a-sdk's ``push_url_validator``: whether pushes may go to ``url`` (:func:`vetted_address`).

    A refusal is logged with its reason.
    """
    try:
        await vetted_address(url)
    except PushURLRefused as exc:
        logger.warning("push URL refused: %s", exc)
        return False
    return True


class PublicOnlyTransport(netguard.AsyncPinnedTransport):
    """:class:`parley.netguard.AsyncPinnedTransport` under ``settings.A2A_PUSH_ALLOW_PRIVATE``: it
    connects only to the addresses it has just vetted, so the policy holds at connect time too (DNS
    rebinding). A refused URL is a :class:`parley.netguard.AddressRefused` (an
    ``httpx.ConnectError``)."""

    def __init__(self) -> None:
        super().__init__(allow_private=lambda: bool(settings.A2A_PUSH_ALLOW_PRIVATE))


class PushSender(BasePushNotificationSender):
    """a2a-sdk's push sender, delivering in the background and, for one task, in order.

    The SDK awaits ``send_notification`` in the task's event consumer, so a
    slow webhook would hold up the turn's answer by up to
    :data:`DELIVERY_TIMEOUT` seconds per event; here it only schedules the
    delivery after the task's previous one. Delivery is best-effort (the
    SDK's: failures are logged). Call :meth:`aclose` at shutdown.
    """

    def __init__(self, config_store: PushNotificationConfigStore) -> None:
        self._http = httpx.AsyncClient(transport=PublicOnlyTransport(), timeout=DELIVERY_TIMEOUT)
        # No push_url_validator: the transport vets the address as it connects, and vetting twice
        # would resolve every push URL twice.
        super().__init__(self._http, config_store)
        self._last: dict[str, asyncio.Task[None]] = {}

    async def send_notification(self, task_id: str, event: PushNotificationEvent) -> None:
        store = self._config_store
        if isinstance(store, DjangoPushConfigStore) and store.without_configs(task_id):
            return
        # The event may be the consumer's own Task, which the next event changes in place.
        snapshot = copy.deepcopy(event)
        delivery = asyncio.create_task(self._deliver(self._last.get(task_id), task_id, snapshot))
        self._last[task_id] = delivery
        delivery.add_done_callback(functools.partial(self._forget, task_id))

    async def _deliver(
        self, previous: asyncio.Task[None] | None, task_id: str, event: PushNotificationEvent
    ) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        await super().send_notification(task_id, event)

    def _forget(self, task_id: str, delivery: asyncio.Task[None]) -> None:
        if self._last.get(task_id) is delivery:
            del self._last[task_id]

    async def aclose(self) -> None:
        """Let the deliveries under way finish (each within :data:`DELIVERY_TIMEOUT`), then close."""
        if self._last:
            await asyncio.wait(list(self._last.values()))
        await self._http.aclose()


class DjangoPushConfigStore(PushNotificationConfigStore):
    """Push configs as protobuf JSON in :class:`a2a_gateway.models.PushConfig`, owner-scoped.

    A config's id defaults to its task's id (a2a-sdk's normalization); setting
    an id again replaces that config. The handler has checked that the caller
    owns the task, except for a config sent inline with a message, which is
    stored before the task is.

    Most tasks have no config, and every event of every task would ask: a task the gateway
    knows can have none (:meth:`mark_without_configs`) is not looked up while it is marked.
    """

    def __init__(self) -> None:
        self._without: set[str] = set()

    def mark_without_configs(self, task_id: str) -> None:
        """Mark ``task_id`` as having no config until :meth:`unmark`: a task new in a call that
        brought no config inline and answers only at its end, whose id its caller cannot know
        before then, so no config can be set for it meanwhile."""
        self._without.add(task_id)

    def unmark(self, task_id: str) -> None:
        """End :meth:`mark_without_configs` (no-op for a task not marked)."""
        self._without.discard(task_id)

    def without_configs(self, task_id: str) -> bool:
        """Whether ``task_id`` is known to have no config (:meth:`mark_without_configs`)."""
        return task_id in self._without

    async def set_info(
        self, task_id: str, notification_config: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """Store the config; -32602 for an id that cannot be stored, a NUL anywhere in it, or a
        task that already has :data:`MAX_CONFIGS_PER_TASK` others."""
        config = normalize_push_notification_config(task_id, notification_config)
        self.unmark(task_id)
        if problem := id_problem(config.id):
            raise InvalidParamsError(message=f"pushNotificationConfig.id {problem}")
        data = MessageToDict(config)
        # Refused as in the task store, whose jsonb holds none: no URL or token with one could be sent.
        if where := nul_path(data, "pushNotificationConfig"):
            raise InvalidParamsError(message=f"{where} must not contain a NUL character")
        agent = call_agent(context)
        others = _configs(context).filter(task_id=task_id).exclude(config_id=config.id)
        if await others.acount() >= MAX_CONFIGS_PER_TASK:
            # Every event goes to every config: unbounded, one message would be a flood for any host.
            raise InvalidParamsError(
                message=f"A task takes at most {MAX_CONFIGS_PER_TASK} push notification configs; delete one."
            )
        # The filter scopes the lookup; what a new row gets is the kwargs and defaults alone.
        await _configs(context).aupdate_or_create(
            owner=owner_of(context),
            task_id=task_id,
            config_id=config.id,
            defaults={"tenant_id": agent.tenant_id, "agent": agent, "data": data},
        )
        return config

    async def get_info(self, task_id: str, context: ServerCallContext) -> list[TaskPushNotificationConfig]:
        """The caller's configs for the task, oldest first."""
        rows = _configs(context).filter(task_id=task_id).order_by("created_at", "config_id")
        return [_parse(row) async for row in rows]

    async def get_info_for_dispatch(self, task_id: str) -> list[TaskPushNotificationConfig]:
        """Every config of the task whose owner (and tenant) is the task's own (:func:`dispatch_configs`)."""
        return await sync_to_async(dispatch_configs)(task_id)

    async def delete_info(
        self, task_id: str, context: ServerCallContext, config_id: str | None = None
    ) -> None:
        """Delete the caller's config ``config_id`` of the task (all of them when None); idempotent."""
        rows = _configs(context).filter(task_id=task_id)
        if config_id is not None:
            if id_problem(config_id):
                return  # no config has such an id, and Postgres would refuse a NUL in the query
            rows = rows.filter(config_id=config_id)
        await rows.adelete()


async def push_task(task: Task) -> None:
    """Push ``task`` itself (a StreamResponse ``{"task": …}``) to its configs (:func:`dispatch_configs`),
    as :class:`PushSender` pushes an event; best-effort, and done when every delivery is.

    For a change made outside a request (a worker's): the async ORM calls run on asgiref's shared
    thread, whose database connection is closed afterwards.
    """
    sender = PushSender(DjangoPushConfigStore())
    try:
        await sender.send_notification(task.id, task)
    finally:
        await sender.aclose()
        await sync_to_async(connections.close_all)()


def _configs(context: ServerCallContext) -> QuerySet[PushConfig]:
    """The push configs of this call's owner, within the agent's tenant."""
    return PushConfig.objects.for_tenant(call_agent(context).tenant_id).filter(owner=owner_of(context))


def dispatch_configs(task_id: str) -> list[TaskPushNotificationConfig]:
    """The configs to deliver the task's events to: every config of the task whose owner (and
    tenant) is the task's own, oldest first; read for every event of every task.

    Most tasks have no config: one plain query says so. The task's partition is read only
    when there are some (a config may be stored before its task, or for an id another
    partition holds, and goes nowhere then).
    """
    configs = list(PushConfig.across_tenants.filter(task_id=task_id).order_by("created_at"))
    if not configs:
        return []
    task = A2ATask.across_tenants.filter(task_id=task_id).values_list("owner", "tenant_id").first()
    return [_parse(c) for c in configs if (c.owner, c.tenant_id) == task]


def _parse(row: PushConfig) -> TaskPushNotificationConfig:
    return ParseDict(row.data, TaskPushNotificationConfig(), ignore_unknown_fields=True)
