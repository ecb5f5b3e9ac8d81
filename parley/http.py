"""Outbound HTTP: one TLS configuration for every client the platform opens.

httpx builds a fresh SSL context, loading the whole CA bundle, for every client
(about 25 ms of CPU, even for plain http). Clients here are short-lived — one
per model call, host operation or counterparty exchange — so they share one
context, built on first use.
"""

from __future__ import annotations

import ssl
from functools import cache
from typing import Any

import httpx


@cache
def ssl_context() -> ssl.SSLContext:
    """The default verifying TLS context (certifi's CA bundle), built once per process."""
    return httpx.create_ssl_context()


def client(**options: Any) -> httpx.Client:
    """An ``httpx.Client`` with ``options`` (timeout, follow_redirects, …) and the shared TLS context."""
    return httpx.Client(verify=ssl_context(), **options)


def async_client(**options: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` with ``options`` and the shared TLS context."""
    return httpx.AsyncClient(verify=ssl_context(), **options)
