from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self) -> None:
        """Give the tool registry the handlers of the rows that are no built-in: the modules that
        run them call :mod:`agents.tools`, which so imports neither."""
        from agents import host_operations, services, tools
        from agents.models import Tool

        tools.register_kind(Tool.Kind.HOST, host_operations.handler_for)
        tools.register_kind(Tool.Kind.AGENT, services.delegate_handler)
