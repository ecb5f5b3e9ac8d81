"""The face's models moved from a2a_gateway to representative: a database made before keeps its rows.

The two migrations of the move are unapplied on the test database (a2a_gateway's 0003 and
representative's 0001, as ``migrate`` would), rows are written through the models of the state
before them, and the two are applied again; the rows are then read through the app's own models,
and the content type the admin's permissions and history point at is still theirs.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import AbstractUser
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from agents.models import Agent
from representative.models import GroundingDocument, IntakeRequest, ModelUsage

LAST = ("a2a_gateway", "0002_public_endpoint")  # the last migration before the move
LEAVE = ("a2a_gateway", "0003_representative_face")
TAKE = ("representative", "0001_initial")


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_the_move_are_the_representatives_after_it(
    agent: Agent, principal: AbstractUser
) -> None:
    loader = MigrationLoader(connection)
    leave, take = loader.get_migration(*LEAVE), loader.get_migration(*TAKE)
    before = loader.project_state(LAST)
    between = loader.project_state([parent.key for parent in loader.graph.node_map[TAKE].parents])
    with connection.schema_editor() as editor:
        take.unapply(between.clone(), editor)
        leave.unapply(before.clone(), editor)
    try:
        old = before.apps
        old_type = ContentType.objects.get(app_label="a2a_gateway", model="groundingdocument")
        document = old.get_model("a2a_gateway", "GroundingDocument").objects.create(
            tenant_id=agent.tenant_id, agent_id=agent.pk, title="Hours", text="Open 9 to 5."
        )
        request = old.get_model("a2a_gateway", "IntakeRequest").objects.create(
            tenant_id=agent.tenant_id,
            agent_id=agent.pk,
            caller="anon",
            summary="Call me.",
            recipient_id=principal.pk,
        )
        usage = old.get_model("a2a_gateway", "ModelUsage").objects.create(
            tenant_id=agent.tenant_id, agent_id=agent.pk, model="m", input_tokens=5, cost=Decimal("0.25")
        )
    finally:
        with connection.schema_editor() as editor:
            leave.apply(before.clone(), editor)
            take.apply(between.clone(), editor)
        ContentType.objects.clear_cache()

    moved = GroundingDocument.across_tenants.get(pk=document.pk)
    assert (moved.agent_id, moved.title, moved.text) == (agent.pk, "Hours", "Open 9 to 5.")
    assert IntakeRequest.across_tenants.get(pk=request.pk).recipient_id == principal.pk
    assert ModelUsage.across_tenants.get(pk=usage.pk).cost == Decimal("0.25")
    assert ContentType.objects.get_for_model(GroundingDocument).pk == old_type.pk
    # The table's id sequence came along: a new row follows the old ones.
    assert (
        GroundingDocument.objects.create(tenant=agent.tenant, agent=agent, title="New", text=".").pk
        > moved.pk
    )
