from django.apps import AppConfig


class RepresentativeConfig(AppConfig):
    """The representative face: an agent's public answers to visitors' questions, from its grounding
    documents only, and the requests visitors leave for its intake owner (README, "The
    representative face"). The A2A gateway hands it a visitor's message; it knows nothing of A2A."""

    name = "representative"
    verbose_name = "Representative face"
