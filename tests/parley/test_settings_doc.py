"""docs/settings.md lists every setting read from the environment, no other, with the defaults the code
has; production settings refuse a secret key that is not one."""

from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from parley import devstack
from parley.settings.base import EMBEDDED_FIELD_ENCRYPTION_KEY
from tests.conftest import DEPLOYMENT_SECRETS, run_python

ROOT = devstack.ROOT
TABLE = ROOT / "docs" / "settings.md"
# Where settings are read from the environment: the apps, the process entry points and the suite's own.
SOURCES = [
    ROOT / "manage.py",
    *(
        path
        for package in ("parley", "agents", "negotiations", "exchange", "a2a_gateway", "api", "mcp_gateway")
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    ),
    ROOT / "tests" / "conftest.py",
    ROOT / "tests" / "e2e" / "conftest.py",
]
NO_DEFAULT = object()
UNKNOWN = object()


def literal(node: ast.expr | None, constants: dict[str, Any]) -> Any:
    """The value of a default made of literals, the module's literal constants and arithmetic on
    them; :data:`UNKNOWN` otherwise."""
    if node is None:
        return NO_DEFAULT
    try:
        return eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}, **constants})
    except (NameError, TypeError, AttributeError):
        return UNKNOWN


def module_constants(tree: ast.Module) -> dict[str, Any]:
    """``NAME = <literal>`` at the top of a module, by name."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = literal(node.value, {})
            if value is not UNKNOWN:
                found[node.targets[0].id] = value
    return found


def read_in_code() -> dict[str, Any]:
    """Every environment variable the sources read, with its default as written where it is a literal."""
    found: dict[str, Any] = {}
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        constants = module_constants(tree)
        for node in ast.walk(tree):
            name, default = None, None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                target = ast.unparse(node.func.value)
                first = node.args[0]
                if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                    continue
                if target == "env" and node.func.attr in {"str", "int", "float", "bool", "list", "db_url"}:
                    name = first.value
                    default = next((k.value for k in node.keywords if k.arg == "default"), None)
                elif target == "os.environ" and node.func.attr in {"get", "setdefault"}:
                    name, default = first.value, node.args[1] if len(node.args) > 1 else None
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Load)
                and ast.unparse(node.value) == "os.environ"
                and isinstance(node.slice, ast.Constant)
            ):
                name = node.slice.value
            if name is not None:
                found.setdefault(name, literal(default, constants))
    return found


def documented() -> dict[str, str]:
    """The table's rows: variable → its default cell."""
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \| (.*?) \| .* \|$", TABLE.read_text(), flags=re.MULTILINE)
    return dict(rows)


def shown(value: Any) -> str:
    """A literal default as the table writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def test_every_setting_read_from_the_environment_is_documented_and_no_other() -> None:
    in_code, in_table = read_in_code(), documented()

    assert sorted(set(in_code) - set(in_table)) == [], "read in the code, missing from docs/settings.md"
    assert sorted(set(in_table) - set(in_code)) == [], "in docs/settings.md, read nowhere"


def test_every_literal_default_is_the_one_documented() -> None:
    in_table = documented()
    wrong = []
    for name, default in read_in_code().items():
        cell = in_table[name]
        written = re.fullmatch(r"`(.*)`", cell)
        if default is NO_DEFAULT or default is UNKNOWN:
            if written:
                wrong.append(f"{name}: documented as the literal {cell}, but the code's default is not one")
            continue
        if written is None:
            wrong.append(f"{name}: the code's default is {shown(default)!r}; document it in backticks")
            continue
        value = written.group(1)
        value = "" if value == '""' else value
        same = (
            float(value) == default
            if isinstance(default, int | float) and not isinstance(default, bool)
            else (value == shown(default))
        )
        if not same:
            wrong.append(f"{name}: documented {value!r}, the code says {shown(default)!r}")

    assert wrong == []


FIELD_ENCRYPTION_KEY = DEPLOYMENT_SECRETS["FIELD_ENCRYPTION_KEYS"]


def production_environ(**environ: str) -> dict[str, str]:
    """This process's environment with ``environ`` and the production settings, none of our secrets but
    a FIELD_ENCRYPTION_KEYS of its own unless ``environ`` names one."""
    secrets = ("SECRET_KEY", "KEY_HASH", "A2A_INBOUND", "FIELD_ENCRYPTION_KEYS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(secrets)}
    env.update(
        {"FIELD_ENCRYPTION_KEYS": FIELD_ENCRYPTION_KEY, **environ},
        DJANGO_SETTINGS_MODULE="parley.settings.production",
    )
    return env


def start_production(*check: str, **environ: str) -> subprocess.CompletedProcess[str]:
    """``manage.py check`` (with the options ``check``) under the production settings with ``environ``."""
    return run_python("manage.py", "check", *check, env=production_environ(**environ))


@pytest.mark.parametrize(
    ("environ", "refusal"),
    [
        ({}, "SECRET_KEY must be set to a secret of your own in production"),
        (
            {"SECRET_KEY": "parley-embedded-default-not-for-production"},
            "the embedded default's key is public",
        ),
        ({"SECRET_KEY": "short"}, "SECRET_KEY is too weak: use at least 50 random characters."),
        ({"SECRET_KEY": "a" * 60}, "SECRET_KEY is too weak"),
        (
            {"SECRET_KEY": "django-insecure-" + "k7-Qx" * 10},
            "SECRET_KEY starts with 'django-insecure-', Django's mark of a development key",
        ),
        (
            {"SECRET_KEY": "k7-Qx" * 12, "KEY_HASH_SECRET": "parley-embedded-default-not-for-production"},
            "KEY_HASH_SECRET must not be the embedded default's public key.",
        ),
        (
            {"SECRET_KEY": "Zq8vW2m-" * 8, "OUTBOUND_ALLOW_PRIVATE": "true"},
            "OUTBOUND_ALLOW_PRIVATE=true lets every organisation's URLs reach this deployment's own "
            "network, and SIGNUP_OPEN lets anyone make an organisation",
        ),
    ],
)
def test_production_refuses_to_start_without_a_secret_of_its_own(
    environ: dict[str, str], refusal: str
) -> None:
    started = start_production(**environ)

    assert started.returncode != 0
    assert "ImproperlyConfigured" in started.stderr
    assert refusal in started.stderr


@pytest.mark.parametrize(
    ("keys", "refusal"),
    [
        (
            None,
            "FIELD_ENCRYPTION_KEYS must be set in production: the keys that encrypt stored secrets",
        ),
        ("", "FIELD_ENCRYPTION_KEYS is empty: give at least one key."),
        (
            f"{FIELD_ENCRYPTION_KEY},not-a-key",
            "FIELD_ENCRYPTION_KEYS: key 2 is not a Fernet key (32 bytes in url-safe base64)",
        ),
        (
            f"{FIELD_ENCRYPTION_KEY},{EMBEDDED_FIELD_ENCRYPTION_KEY}",
            "FIELD_ENCRYPTION_KEYS must not hold the embedded default's public key",
        ),
    ],
)
def test_production_refuses_to_start_without_encryption_keys_of_its_own(
    keys: str | None, refusal: str
) -> None:
    env = production_environ(SECRET_KEY="Zq8vW2m-" * 8)
    if keys is None:
        del env["FIELD_ENCRYPTION_KEYS"]
    else:
        env["FIELD_ENCRYPTION_KEYS"] = keys

    started = run_python("manage.py", "check", env=env)

    assert started.returncode != 0
    assert "ImproperlyConfigured" in started.stderr
    assert refusal in started.stderr
    assert "not-a-key" not in started.stderr  # a key is never shown


@pytest.mark.parametrize(
    "environ",
    [
        {},
        # A single-tenant deployment (sign-up closed) may call private addresses: its own model server.
        {"OUTBOUND_ALLOW_PRIVATE": "true", "SIGNUP_OPEN": "false"},
    ],
)
def test_production_starts_with_a_secret_of_its_own(environ: dict[str, str]) -> None:
    started = start_production(SECRET_KEY="Zq8vW2m-" * 8, **environ)

    assert (started.returncode, started.stdout.strip()) == (
        0,
        "System check identified no issues (0 silenced).",
    )


def test_the_deployment_check_finds_nothing_under_production_settings() -> None:
    started = start_production("--deploy", "--fail-level", "WARNING", SECRET_KEY="Zq8vW2m-" * 8)

    assert (started.returncode, started.stdout.strip(), started.stderr) == (
        0,
        "System check identified no issues (0 silenced).",
        "",
    )


# Under the production settings, in a process of their own: the health check over plain http, a page
# over plain http, and the same page as the proxy that terminated TLS passes it on.
ASKED_OVER_HTTP_AND_HTTPS = """
import re
import django
django.setup()
from django.test import Client
client = Client()
health = client.get("/health")
page = client.get("/login/")
secure = client.get("/login/", headers={"X-Forwarded-Proto": "https"})
print(health.status_code, health.headers.get("Strict-Transport-Security"))
print(page.status_code, page.headers.get("Location"))
print(secure.status_code, secure.headers.get("Strict-Transport-Security"))
stylesheet = re.search(r'href="(/static/[^"]+\\.css)"', secure.content.decode())[1]
served = client.get(stylesheet, headers={"X-Forwarded-Proto": "https"})
print(stylesheet, served.status_code, served.headers.get("Cache-Control"))
"""


def test_production_serves_https_only_but_its_health_check_and_its_collected_static_files(
    tmp_path: Path,
) -> None:
    env = production_environ(
        SECRET_KEY="Zq8vW2m-" * 8,
        ALLOWED_HOSTS="testserver",
        DATABASE_URL=f"sqlite:///{tmp_path / 'health.sqlite3'}",
        REDIS_URL="",
        STATIC_ROOT=str(tmp_path / "static"),
    )
    run_python("manage.py", "collectstatic", "--noinput", env=env, check=True)
    asked = run_python("-c", ASKED_OVER_HTTP_AND_HTTPS, env=env, check=True)

    lines = asked.stdout.splitlines()
    assert lines[:3] == [
        "200 None",
        "301 https://testserver/login/",
        "200 max-age=31536000; includeSubDomains; preload",
    ]
    # The page names the stylesheet by its content hash, and the web process serves it for good.
    assert re.fullmatch(r"/static/\S+\.[0-9a-f]{12}\.css 200 max-age=315360000, public, immutable", lines[3])


def beat_environ(schedule: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CELERY_BEAT_SCHEDULE_FILENAME": str(schedule),
        "DJANGO_SETTINGS_MODULE": "parley.settings.test",
    }


def test_a_beat_process_keeps_its_schedule_where_the_setting_says_making_its_directory(
    tmp_path: Path,
) -> None:
    schedule = tmp_path / "var" / "lib" / "parley" / "beat-schedule"
    before = set(ROOT.glob("celerybeat-schedule*"))
    beat = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "parley", "beat", "--loglevel", "INFO"],
        cwd=ROOT,
        env=beat_environ(schedule),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert beat.stdout is not None
        for line in beat.stdout:
            if "Scheduler: Sending due task" in line:  # it has opened its schedule and is running
                break
    finally:
        beat.terminate()
        beat.wait(timeout=30)

    assert set(ROOT.glob("celerybeat-schedule*")) == before
    assert list(schedule.parent.glob("beat-schedule*")) != []


def test_beat_refuses_to_start_in_one_line_where_it_cannot_make_the_directory(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    schedule = tmp_path / "a-file" / "parley" / "beat-schedule"

    started = run_python("-m", "celery", "-A", "parley", "beat", env=beat_environ(schedule))

    output = started.stdout + started.stderr
    assert started.returncode == 1
    assert (
        f"CELERY_BEAT_SCHEDULE_FILENAME={schedule}: cannot create its directory {schedule.parent} "
        "(Not a directory). Create it, writable by this user, or set another path."
    ) in output
    assert "Traceback" not in output


def test_the_default_beat_schedule_is_one_per_checkout() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CELERY_BEAT_SCHEDULE_FILENAME"}
    env["DJANGO_SETTINGS_MODULE"] = "parley.settings.base"
    shown = run_python(
        "-c",
        "from django.conf import settings; print(settings.CELERY_BEAT_SCHEDULE_FILENAME)",
        env=env,
        check=True,
    )

    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    assert shown.stdout.strip() == str(Path(tempfile.gettempdir()) / f"parley-celerybeat-schedule-{checkout}")
