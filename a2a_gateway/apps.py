from django.apps import AppConfig


class A2AGatewayConfig(AppConfig):
    name = "a2a_gateway"
    verbose_name = "A2A gateway"

    def ready(self) -> None:
        """Validate the agent fields the public endpoint reads whenever an agent is cleaned, send
        the reply to an answered inbound negotiation at once where its Task has push notifications,
        build the card the host API previews as the endpoint serves it, and sign settlements with
        the tenant's card-signing key."""
        from a2a_gateway import cards, cors, hosts, replies
        from agents.addresses import register_card_document
        from agents.configuration import register_agent_check
        from agents.models import Agent
        from negotiations.services.parking import register_answered_hook
        from negotiations.services.signatures import register_signing_keys

        def card_overrides(agent: Agent) -> None:
            if agent.tenant_id is not None:  # the card names the tenant
                cards.check_overrides(agent)

        register_agent_check(card_overrides)
        register_agent_check(hosts.check_host_name)
        register_agent_check(cors.check_cors_origins)
        register_answered_hook(replies.on_answered)
        register_card_document(cards.card_document)
        register_signing_keys(cards.settlement_key)
