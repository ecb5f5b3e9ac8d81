"""Writes of an agent's grounding documents: the public text its representative answers visitors from.

The host API and the dashboard's pages both save through these (the pages' form,
:class:`representative.forms.GroundingDocumentForm`, checks the input first). Each write
is one transaction; an edit locks the row. Errors are ``ValidationError`` keyed by field, nothing
written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from agents.models import Agent
from representative.models import GroundingDocument


def grounding_document_create(*, agent: Agent, title: str, text: str) -> GroundingDocument:
    """A new grounding document of ``agent``, in the agent's tenant."""
    document = GroundingDocument(tenant_id=agent.tenant_id, agent=agent, title=title, text=text)
    document.full_clean()
    document.save()
    return document


def grounding_document_update(*, document: GroundingDocument, values: Mapping[str, Any]) -> GroundingDocument:
    """``document`` with ``values`` (``title`` and/or ``text``) set; its agent stays."""
    with transaction.atomic():
        locked = (
            GroundingDocument.objects.for_tenant(document.tenant_id).select_for_update().get(pk=document.pk)
        )
        for name, value in values.items():
            setattr(locked, name, value)
        locked.full_clean()
        locked.save(update_fields=[*values, "updated_at"])
    return locked


def grounding_document_delete(*, document: GroundingDocument) -> None:
    """Delete ``document``: the representative no longer answers from it."""
    document.delete()
