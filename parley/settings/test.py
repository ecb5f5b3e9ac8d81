"""Settings for the test suite: the real Postgres and Redis on this machine.

``DATABASE_URL`` and ``REDIS_URL`` may be overridden from the environment; the
defaults point at the services this machine starts before a session and CI.
"""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/parley")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")

from parley.settings.base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Host operations in tests are served by HTTP servers on loopback.
PARLEY_HOST_OPERATIONS_ALLOW_HTTP = True

# Webhook receivers in tests listen on loopback over plain http; the live worker retries within
# seconds. Tests of the address policy set WEBHOOKS_ALLOW_PRIVATE = False themselves.
WEBHOOKS_ALLOW_PRIVATE = True
WEBHOOKS_ALLOW_HTTP = True
WEBHOOK_TIMEOUT = 5.0
WEBHOOK_BACKOFF_BASE = 0.3
WEBHOOK_BACKOFF_MAX = 2.0
WEBHOOK_RETRY_FOR = 60.0
