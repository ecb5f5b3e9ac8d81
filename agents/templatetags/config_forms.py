"""What the configuration forms' templates ask of a form."""

from __future__ import annotations

from django import forms, template

register = template.Library()


@register.simple_tag
def error_links(form: forms.BaseForm) -> list[tuple[str, str]]:
    """(anchor, label) of each field of ``form`` with an error, in form order, for the error summary's
    links: where the form says the field is shown (``form.anchor(name)``, e.g. the group of an
    agent's rows), else the field's own id."""
    anchor = getattr(form, "anchor", None)
    links = []
    for field in form:
        if field.errors:
            where = anchor(field.name) if anchor else field.id_for_label or field.auto_id
            links.append((where, str(field.label)))
    return links
