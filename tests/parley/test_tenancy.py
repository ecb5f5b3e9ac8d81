"""Tenancy fails closed: a tenant-owned model's ``objects`` reads only through ``for_tenant``, writes
only rows that name their tenant, and every read across tenants is one this file allows by name."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.test import Client

from agents.models import Agent, Intent
from parley.models import Tenant, TenantOwnedModel, UnscopedQuery

TENANT_MODELS = sorted(
    (m for m in apps.get_models() if issubclass(m, TenantOwnedModel)), key=lambda m: m._meta.label
)
ROOT = Path(__file__).resolve().parents[2]

# The reads across tenants the code makes, each ``module:function`` with why it must.
ACROSS_TENANTS = {
    "parley.accounts:remembered_invitation": "the visitor's session names an invitation to a tenant "
    "they do not belong to yet",
    "parley.services:api_key_authenticate": "a REST request's key is what finds its tenant",
    "parley.services:_place_take": "the rows of every model that names the placeholder account, "
    "Membership among them, filtered to its tenant by hand (the models are found through relations)",
    "parley.selectors:invitation_by_token": "an invitation link's token is what finds its tenant",
    "parley.selectors:invitations_to": "a user's invitations are from tenants they are not in",
    "parley.celery:stalled_resend": "a beat sweep stamps the rows it sent again, of every tenant",
    "parley.webhooks.sweeps:deliveries_overdue_enqueue": "a beat sweep of every tenant's deliveries",
    "agents.services.sweeps:runs_expire_due": "a beat sweep of every tenant's runs",
    "agents.services.sweeps:stalled_work": "a beat sweep of every tenant's runs and questions",
    "agents.services.sweeps:stalled_work_resend": "a beat sweep stamps the runs and questions it sent again",
    "negotiations.services.sweeps:stalled_pumps": "a beat sweep of every tenant's negotiations",
    "negotiations.demo:demo_usage": "the demo reads both its tenants' moves of one exchange",
    "a2a_gateway.auth:agent_at": "the A2A path's tenant and agent slugs find the agent",
    "a2a_gateway.hosts:hosted_agent": "a request's host name finds its agent, of any tenant",
    "a2a_gateway.push:dispatch_configs": "the push configs of a task, whose tenant the task's row says",
    "a2a_gateway.abandoned:abandoned_tasks_answer": "a beat sweep of every tenant's A2A Tasks",
    "a2a_gateway.abandoned:answer_left": "a Task left under way is answered by its id, under its row lock",
    "exchange.services:prepared_expire": "a beat sweep of every tenant's prepared requests",
    "exchange.outbound:stalled_sends": "a beat sweep of every tenant's outbound exchanges",
    "api.idempotency:expire": "a beat sweep of every tenant's idempotency keys",
    "a2a_gateway.events:_stored": "a task's subscriber, already found to own it through the task store, "
    "reads the task again by its id",
    "agents.services.host_names:taken": "a host name proved by an agent of any tenant is taken for all",
    "parley.encryption:_rewrite": "reencrypt_secrets moves every tenant's secrets to the first key",
}

# --- The manager --------------------------------------------------------------------------------


def _unscoped_reads(model: type[TenantOwnedModel]) -> Iterator[Any]:
    manager = model.objects
    yield lambda: manager.all()
    yield lambda: manager.filter(pk=1)
    yield lambda: manager.exclude(pk=1)
    yield lambda: manager.get(pk=1)
    yield lambda: manager.count()
    yield lambda: manager.exists()
    yield lambda: manager.first()
    yield lambda: manager.values_list("pk")
    yield lambda: manager.aggregate(n=Count("pk"))
    yield lambda: manager.select_related("tenant")
    yield lambda: manager.in_bulk([1])


@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m._meta.label)
def test_a_query_without_a_tenant_is_refused_naming_both_ways_out(model: type[TenantOwnedModel]) -> None:
    name = model.__name__
    for read in _unscoped_reads(model):
        with pytest.raises(UnscopedQuery) as refused:
            read()
        assert f"{name}.objects.for_tenant(tenant)" in str(refused.value)
        assert f"{name}.across_tenants" in str(refused.value)


@pytest.mark.django_db
@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m._meta.label)
def test_for_tenant_is_the_tenants_rows(model: type[TenantOwnedModel], tenant: Tenant) -> None:
    expected = str(model.across_tenants.filter(tenant_id=tenant.pk).query)
    assert str(model.objects.for_tenant(tenant).query) == expected
    assert str(model.objects.for_tenant(tenant.pk).query) == expected
    assert not model.objects.none().exists()


@pytest.mark.django_db
def test_for_tenant_reads_no_other_tenants_row(agent: Agent, seller: Agent) -> None:
    assert list(Agent.objects.for_tenant(agent.tenant)) == [agent]
    assert list(Agent.objects.for_tenant(seller.tenant_id).filter(slug=agent.slug)) == []
    with pytest.raises(Agent.DoesNotExist):
        Agent.objects.for_tenant(agent.tenant).get(pk=seller.pk)


@pytest.mark.django_db
@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m._meta.label)
def test_a_write_that_names_no_tenant_is_refused(model: type[TenantOwnedModel]) -> None:
    manager = model.objects
    writes = [
        lambda: manager.create(),
        lambda: manager.create(tenant=None),
        lambda: manager.get_or_create(pk=1),
        lambda: manager.update_or_create(pk=1, defaults={}),
        lambda: manager.bulk_create([model()]),
    ]
    for write in writes:
        with pytest.raises(UnscopedQuery, match=model.__name__):
            write()
    assert not model.across_tenants.exists()


@pytest.mark.django_db
def test_a_write_that_names_its_tenant_is_made(agent: Agent, tenant: Tenant) -> None:
    made = Intent.objects.create(tenant=tenant, agent=agent, statement="One.")
    got, created = Intent.objects.get_or_create(tenant_id=tenant.pk, agent=agent, statement="One.")
    assert (got, created) == (made, False)
    updated, created = Intent.objects.update_or_create(
        tenant=tenant, agent=agent, external_id="two", defaults={"statement": "Two."}
    )
    assert created
    [bulk] = Intent.objects.bulk_create([Intent(tenant=tenant, agent=agent, statement="Three.")])
    assert set(Intent.objects.for_tenant(tenant)) == {made, updated, bulk}


# --- What Django reads through the default manager ------------------------------------------------


@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m._meta.label)
def test_the_default_manager_is_across_tenants(model: type[TenantOwnedModel]) -> None:
    assert model._meta.default_manager is not None
    assert model._meta.default_manager.name == "across_tenants"


@pytest.mark.django_db
def test_related_managers_and_unique_validation_read_through_the_default_manager(
    agent: Agent, intent: Intent, seller: Agent
) -> None:
    assert list(agent.intents.all()) == [intent]
    duplicate = Agent(tenant=agent.tenant, slug=agent.slug, name="Again", party_id="acme:user:again")
    with pytest.raises(ValidationError) as refused:
        duplicate.full_clean()
    assert refused.value.message_dict
    Agent(tenant=seller.tenant, slug=agent.slug, name="Elsewhere", party_id="globex:x").validate_unique()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "model",
    [m for m in TENANT_MODELS if m in admin.site._registry],
    ids=lambda m: m._meta.label,
)
def test_the_admin_lists_and_adds_every_tenant_owned_model(
    model: type[TenantOwnedModel], client: Client, agent: Agent
) -> None:
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw"))
    listed = client.get(f"/admin/{model._meta.app_label}/{model._meta.model_name}/")
    assert listed.status_code == 200
    assert listed.context["cl"].result_count == model.across_tenants.count()
    # Some models are not added by hand (403); a form that is shown builds its fields' querysets.
    assert client.get(f"/admin/{model._meta.app_label}/{model._meta.model_name}/add/").status_code in (
        200,
        403,
    )


# --- The static check -------------------------------------------------------------------------------

# What a tenant-owned model's ``objects`` may be followed by (anything else raises UnscopedQuery).
SCOPED = {"for_tenant", "none", "create", "get_or_create", "update_or_create", "bulk_create"}
ESCAPES = {"across_tenants", "_default_manager", "_base_manager"}
LOOKUPS = {"get_object_or_404", "aget_object_or_404", "get_list_or_404", "aget_list_or_404"}
SKIPPED_DIRS = {"tests", "migrations", "docs", "static", "templates"}


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


class _Finder(ast.NodeVisitor):
    """The unscoped accesses of one module, each ``(module:function, line, what)``."""

    def __init__(self, module: str, models: set[str]) -> None:
        self.module = module
        self.models = models
        self.scope: list[str] = []
        self.found: list[tuple[str, int, str]] = []

    def _report(self, node: ast.AST, what: str) -> None:
        where = ".".join(self.scope) or "<module>"
        self.found.append((f"{self.module}:{where}", getattr(node, "lineno", 0), what))

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def _objects(self, node: ast.expr) -> str | None:
        """The model ``node`` is the ``objects`` of, if a tenant-owned one."""
        if isinstance(node, ast.Attribute) and node.attr == "objects" and _name(node.value) in self.models:
            return _name(node.value)
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in ESCAPES:
            self._report(node, f".{node.attr}")
        model = self._objects(node.value)
        if model is not None:
            if node.attr not in SCOPED:
                self._report(node, f"{model}.objects.{node.attr}")
            self.generic_visit(node.value)  # past the manager itself, which is used here
            return
        model = self._objects(node)
        if model is not None:  # the manager handed on as it is (a queryset= argument, a variable)
            self._report(node, f"{model}.objects")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _name(node.func) in LOOKUPS and node.args and _name(node.args[0]) in self.models:
            self._report(node, f"{_name(node.func)}({_name(node.args[0])}, ...)")
        self.generic_visit(node)


def unscoped(source: str, module: str) -> list[tuple[str, int, str]]:
    """The unscoped accesses in ``source`` (the text of ``module``) to the tenant-owned models."""
    finder = _Finder(module, {m.__name__ for m in TENANT_MODELS})
    finder.visit(ast.parse(source))
    return finder.found


def _sources() -> Iterator[tuple[str, Path]]:
    """Every module of the repository but its tests and migrations, by dotted name."""
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if any(p.startswith(".") or p in SKIPPED_DIRS or p.endswith(".egg-info") for p in parts[:-1]):
            continue
        yield ".".join(parts).removesuffix(".py").removesuffix(".__init__"), path


def test_every_read_across_tenants_is_one_allowed_here() -> None:
    found = [hit for module, path in _sources() for hit in unscoped(path.read_text(), module)]
    assert found, "the check reads no source"
    new = [f"{where} (line {line}): {what}" for where, line, what in found if where not in ACROSS_TENANTS]
    assert not new, "unscoped access to tenant-owned rows; use for_tenant, or allow it here with why"
    stale = set(ACROSS_TENANTS) - {where for where, _, _ in found}
    assert not stale, f"allowed but no longer made: {sorted(stale)}"


def test_the_check_reports_a_new_unscoped_access() -> None:
    source = """
from django.shortcuts import get_object_or_404
from agents.models import Agent, Run

def sneak(tenant, pk):
    Agent.objects.for_tenant(tenant).get(pk=pk)  # scoped
    Run.objects.create(tenant=tenant)  # names its tenant
    Agent.across_tenants.get(pk=pk)
    Run.objects.filter(pk=pk)
    get_object_or_404(Agent, pk=pk)
    Run._default_manager.all()
    serializer(queryset=Run.objects)

class View:
    def get(self):
        return Agent.objects.all()
"""
    assert unscoped(source, "agents.sneaky") == [
        ("agents.sneaky:sneak", 8, ".across_tenants"),
        ("agents.sneaky:sneak", 9, "Run.objects.filter"),
        ("agents.sneaky:sneak", 10, "get_object_or_404(Agent, ...)"),
        ("agents.sneaky:sneak", 11, "._default_manager"),
        ("agents.sneaky:sneak", 12, "Run.objects"),
        ("agents.sneaky:View.get", 16, "Agent.objects.all"),
    ]
    assert "agents.sneaky:sneak" not in ACROSS_TENANTS
