from django.apps import AppConfig


class NegotiationsConfig(AppConfig):
    name = "negotiations"

    def ready(self) -> None:
        from agents.configuration import register_agent_check, register_intent_check
        from agents.selectors import register_answer_reader, register_parked_source, register_waiting_source
        from negotiations import checks, selectors, tools

        tools.register()
        register_waiting_source(selectors.waiting_for_party)
        register_parked_source(selectors.parked_inbound)
        register_answer_reader(selectors.question_understood)
        register_agent_check(checks.check_timezone)
        # The terms description before the guards, whose terms it declares.
        register_agent_check(checks.check_terms_description)
        register_agent_check(checks.check_term_guards)
        register_agent_check(checks.check_allowed_actions)
        register_intent_check(checks.check_intent_term_guards)
