"""The suite on the embedded default: SQLite (in memory), no Redis.

``make test`` runs the tests that need no live stack and no Redis a second time
under these settings (``tests/conftest.py`` leaves the others out), so every
page and API list is shown to work on both databases the product runs on.
"""

import os

os.environ["TEST_DATABASE_URL"] = "sqlite://:memory:"
os.environ["TEST_REDIS_URL"] = ""

from parley.settings.test import *  # noqa: F403
from parley.settings.test import DATABASES

DATABASES["default"]["TEST"] = {}
