from django.apps import AppConfig


class NegotiationsConfig(AppConfig):
    name = "negotiations"

    def ready(self) -> None:
        from negotiations import tools

        tools.register()
