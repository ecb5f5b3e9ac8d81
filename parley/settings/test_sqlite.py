"""The suite on the embedded default: SQLite, no Redis.

``make test`` runs the tests that need no live stack and no Redis a second time
under these settings (``tests/conftest.py`` leaves the others out), so every
page and API list is shown to work on both databases the product runs on.

The database is a file, as the embedded default's is (WAL, a busy timeout, writes
that wait for the lock): an in-memory database would share one cache with
table locks that fail at once where the product's would wait. It lives in the
system's temporary directory, one per checkout, and is dropped at the end.
"""

import hashlib
import os
import tempfile
from pathlib import Path

os.environ["TEST_DATABASE_URL"] = "sqlite:///" + str(
    Path(tempfile.gettempdir())
    / f"parley-test-{hashlib.sha256(str(Path(__file__).resolve()).encode()).hexdigest()[:12]}.sqlite3"
)
os.environ["TEST_REDIS_URL"] = ""

from parley.settings.test import *  # noqa: F403
