from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self) -> None:
        """Give the tool registry the handlers of the rows that are no built-in (the modules that run
        them call :mod:`agents.tools`, which so imports neither), and tell ``parley``'s members
        what the agents need of them (:mod:`agents.members`)."""
        from agents import host_operations, members, tools
        from agents.models import Tool
        from agents.services import delegation
        from parley.selectors import register_answers_for
        from parley.services import register_member_check

        tools.register_kind(Tool.Kind.HOST, host_operations.handler_for)
        tools.register_kind(Tool.Kind.AGENT, delegation.delegate_handler)
        register_member_check(members.check_member)
        register_answers_for(members.answered_for)
