"""Settings for the test suite: the real Postgres and Redis on this machine.

The suite never reads ``DATABASE_URL`` or ``REDIS_URL``, which name a
developer's own services; it reads its own, so two checkouts (or the suite and
``make run``) on one machine can be kept apart:

* ``TEST_DATABASE_URL`` — the database the suite creates, uses and drops
  (default ``postgres://postgres@127.0.0.1:5432/test_parley``);
* ``TEST_REDIS_URL`` — the Redis database of the live stack: broker, channel
  layer, caps (default ``redis://127.0.0.1:6379/13``); the suite empties it;
* ``TEST_SPARE_REDIS_URL`` — a second Redis database, for tests that need a
  broker no other process takes from (default ``redis://127.0.0.1:6379/14``);
  the suite empties it too.

The processes the suite starts (web, workers) load these settings as well, so
they find the same databases through the environment they inherit.
"""

import os

os.environ["DATABASE_URL"] = os.environ.get(
    "TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test_parley"
)
os.environ["REDIS_URL"] = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/13")

from parley.settings.base import *  # noqa: F403
from parley.settings.base import DATABASES, env

# The suite's database is the one named, not Django's "test_" + its name.
DATABASES["default"]["TEST"] = {"NAME": DATABASES["default"]["NAME"]}
TEST_SPARE_REDIS_URL = env.str("TEST_SPARE_REDIS_URL", default="redis://127.0.0.1:6379/14")

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Host operations in tests are served by HTTP servers on loopback.
PARLEY_HOST_OPERATIONS_ALLOW_HTTP = True

# Webhook receivers in tests listen on loopback over plain http; the live worker retries within
# seconds. Tests of the address policy set WEBHOOKS_ALLOW_PRIVATE = False themselves.
WEBHOOKS_ALLOW_PRIVATE = True
WEBHOOKS_ALLOW_HTTP = True
# The suite's counterparties, hooks, host operations and model servers are on loopback. Tests of the
# policy set OUTBOUND_ALLOW_PRIVATE = False themselves.
OUTBOUND_ALLOW_PRIVATE = True
WEBHOOK_TIMEOUT = 5.0
WEBHOOK_BACKOFF_BASE = 0.3
WEBHOOK_BACKOFF_MAX = 2.0
WEBHOOK_RETRY_FOR = 60.0
