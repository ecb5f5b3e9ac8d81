"""Dashboard forms of negotiations: the board's filters."""

from __future__ import annotations

from django import forms
from django.utils.text import capfirst

from agents.forms import AgentIntentFilterForm
from negotiations.models import Negotiation
from negotiations.selectors import BOARD_ORDERS

# Longest counterparty name or URL part the board searches for, in characters.
MAX_COUNTERPARTY = 200


class BoardFilterForm(AgentIntentFilterForm):
    """The board's GET filters, every one optional; an empty form shows every negotiation.

    ``cleaned_data`` has exactly the keyword arguments of
    :func:`negotiations.selectors.board` other than ``tenant``, and ``sort``, the order of the rows
    (a key of :data:`negotiations.selectors.BOARD_ORDERS`, "" for newest first; see
    :func:`negotiations.selectors.board_sorted`).
    """

    status = forms.ChoiceField(
        choices=[
            ("", "Any status"),
            *((value, capfirst(label)) for value, label in Negotiation.Status.choices),
        ],
        required=False,
        error_messages={"invalid_choice": "Choose a status from the list."},
    )
    direction = forms.ChoiceField(
        choices=[("", "Both directions"), *Negotiation.Direction.choices],
        required=False,
        error_messages={"invalid_choice": "Choose a direction from the list."},
    )
    counterparty = forms.CharField(
        required=False,
        max_length=MAX_COUNTERPARTY,
        strip=True,
        help_text="Part of the counterparty's name or URL.",
        error_messages={"max_length": "Search for at most %(limit_value)d characters."},
    )
    sort = forms.ChoiceField(
        choices=[("", "Newest first"), *BOARD_ORDERS.items()],
        required=False,
        label="Order",
        error_messages={"invalid_choice": "Choose an order from the list."},
    )
