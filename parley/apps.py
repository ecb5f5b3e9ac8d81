from django.apps import AppConfig


class ParleyConfig(AppConfig):
    name = "parley"
    verbose_name = "Parley platform"
