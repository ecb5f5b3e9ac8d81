"""Parley: the platform package (settings, routing, Celery, tenancy, live events)."""

from parley.celery import app as celery_app

__all__ = ("celery_app",)
