"""``manage.py demo`` on a chat-completions model: the flags, their refusals, and the whole scenario
run as ``make demo`` runs it (its own process, the embedded default) with every agent on a loopback
chat-completions server whose policy plays Tomas's run and every negotiation turn."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from agents.models import OFFLINE, Agent, ModelEndpoint
from negotiations import demo
from negotiations.model_negotiator import MOVE_TOOL
from parley import devstack
from parley.models import Membership
from tests.chat_server import ChatServer
from tests.conftest import free_port, wait_until
from tests.negotiating_policy import AgentLoopPolicy

KEY_ENV = "PARLEY_DEMO_TEST_KEY"


def demo_environ(database: Path, **environ: str) -> dict[str, str]:
    """The environment ``make demo`` gives the demo: base settings, SQLite at ``database``, no Redis."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(environ, DATABASE_URL=f"sqlite:///{database}")
    return env


def run_demo(*arguments: str, database: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``manage.py demo`` as ``make demo`` runs it: base settings, SQLite at ``database``, no Redis."""
    return subprocess.run(
        [sys.executable, "manage.py", "demo", *arguments],
        cwd=devstack.ROOT,
        env=demo_environ(database, **environ),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_demo_runs_with_every_agent_on_a_chat_model(tmp_path: Path) -> None:
    policy = AgentLoopPolicy()
    with ChatServer(responder=policy) as chat:
        done = run_demo(
            "--model-url",
            chat.url,
            "--model",
            "house-model",
            "--model-key-env",
            KEY_ENV,
            database=tmp_path / "demo.sqlite3",
            environ={KEY_ENV: "sk-demo"},
        )

    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    base = re.search(r"^Parley is serving on (http://127\.0\.0\.1:\d+) ", out, re.M)
    assert base is not None, out
    operator = f"log in at {base.group(1)}/login/ as maya, password maya-demo."
    assert f"Acme's operator (agents, tools, models): {operator}" in out
    assert f"Every agent runs on the model house-model at {chat.url} (key from ${KEY_ENV})." in out
    assert "The agent stops and asks Tomas: What is the most (or least) I may agree to per day?" in out
    assert re.search(
        r"Models used: house-model answered the run's steps; house-model decided \d+ negotiation", out
    )
    assert out.count("verdicts match: yes") == 3
    settled = re.findall(r"^    acme \(Tomas\)  (\w+) \(basis (\w+)\)", out, re.M)
    assert settled == [("agreed", "reference"), ("declined", "state"), ("unconfirmed", "state")]
    # Every model call went to the server, with the key: the run's four steps and every move.
    assert {r.headers["authorization"] for r in chat.requests} == {"Bearer sk-demo"}
    assert {r.body["model"] for r in chat.requests} == {"house-model"}
    assert policy.decisions == len(chat.requests) - 4
    assert policy.finished == 1
    # The run's last step carries what it did: negotiate with the three CFOs, ask Tomas, answer them.
    steps = [
        r.body for r in chat.requests if MOVE_TOOL not in {t["function"]["name"] for t in r.body["tools"]}
    ]
    calls = [c["function"] for m in steps[-1]["messages"] for c in m.get("tool_calls") or []]
    assert [c["name"] for c in calls] == ["negotiate", "ask_user", "answer"]
    targets = json.loads(calls[0]["arguments"])["targets"]
    assert [t["url"].rsplit("/a2a/", 1)[1] for t in targets] == [
        "cfo-guild/idris",
        "cfo-guild/noor",
        "cfo-guild/priya",
    ]
    assert json.loads(calls[2]["arguments"])["guidance"] == "Up to €1,100 a day."


def test_the_scripted_demo_says_what_its_agent_understood_of_tomass_answer(tmp_path: Path) -> None:
    done = run_demo(database=tmp_path / "demo.sqlite3", environ={})

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    at = lines.index("Tomas answers: Up to €1,100 a day.")
    assert lines[at + 1] == "Understood: at most 1,100 EUR per day for amount."
    assert done.stdout.count("verdicts match: yes") == 3


@pytest.mark.parametrize(
    ("arguments", "environ", "refusal"),
    [
        (
            ["--model-url", "ftp://models.example/v1", "--model", "m"],
            {},
            "--model-url 'ftp://models.example/v1' is not an http(s) URL of a chat-completions endpoint",
        ),
        (["--model-url", "https:///v1", "--model", "m"], {}, "is not an http(s) URL"),
        (
            ["--model-url", "https://models.example/v1", "--model", "m", "--model-key-env", KEY_ENV],
            {},
            f"--model-key-env names {KEY_ENV}, which is not set in the environment",
        ),
        (
            ["--model-url", "https://models.example/v1", "--model", "m", "--model-key-env", KEY_ENV],
            {KEY_ENV: ""},
            f"--model-key-env names {KEY_ENV}, which is not set in the environment",
        ),
        (
            ["--model-url", "https://models.example/v1", "--model", OFFLINE],
            {},
            "the model cannot be used: name: 'offline' is the built-in model; choose another name.",
        ),
        (
            ["--model-url", "https://user:pw@models.example/v1", "--model", "m"],
            {},
            "base_url: Give the URL without user:password@",
        ),
        (["--model", "m"], {}, "Give --model-url and --model together"),
        (["--model-key-env", KEY_ENV], {KEY_ENV: "k"}, "Give --model-url and --model together"),
    ],
)
def test_a_model_it_cannot_use_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, arguments: list[str], environ: dict[str, str], refusal: str
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)

    # No database access is allowed here: a refusal that migrated or seeded anything would fail.
    with pytest.raises(CommandError) as refused:
        call_command("demo", *arguments)

    assert refusal in str(refused.value)


def test_fresh_never_deletes_a_database_that_is_not_a_sqlite_file(settings: Any) -> None:
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        pytest.skip("the suite's database is a SQLite file here")
    db = settings.DATABASES["default"]

    # No database access is allowed here: the refusal comes first.
    with pytest.raises(CommandError) as refused:
        call_command("demo", "--fresh")

    assert str(refused.value) == (
        f"--fresh deletes a SQLite file; DATABASE_URL names {db['HOST']}:{db['PORT']}/{db['NAME']}."
    )


@pytest.mark.django_db
def test_the_seed_puts_every_agent_on_the_model_or_leaves_them_offline() -> None:
    world = demo.demo_seed(demo.DemoModel(name="house-model", base_url="http://127.0.0.1:9/v1", api_key="k"))

    agents = [world.tomas_agent, *world.cfo_agents]
    assert {a.model for a in agents} == {"house-model"}
    endpoints = ModelEndpoint.across_tenants.order_by("tenant__slug")
    assert [(e.tenant.slug, e.name, e.upstream_model, e.base_url, e.api_key) for e in endpoints] == [
        ("acme", "house-model", "house-model", "http://127.0.0.1:9/v1", "k"),
        ("cfo-guild", "house-model", "house-model", "http://127.0.0.1:9/v1", "k"),
    ]

    demo.demo_seed()

    assert set(Agent.across_tenants.values_list("model", flat=True)) == {OFFLINE}
    assert not ModelEndpoint.across_tenants.exists()


@pytest.mark.django_db
def test_the_demo_seeds_an_operator_of_acme_who_logs_in_through_the_form(client: Client) -> None:
    demo.demo_seed()
    demo.demo_seed()  # seeding again resets the accounts, it does not fail on them

    response = client.post(
        reverse("login"), {"login": demo.OPERATOR_USERNAME, "password": demo.OPERATOR_PASSWORD}, follow=True
    )

    assert response.redirect_chain[-1] == (reverse("agents:inbox", kwargs={"tenant": "acme"}), 302)
    maya = Membership.objects.get(user__username="maya")
    assert (maya.tenant.slug, maya.role) == ("acme", Membership.Role.OPERATOR)
    assert client.get(reverse("agents:agent-create", kwargs={"tenant": "acme"})).status_code == 200
    tomas = Client()
    tomas.post(reverse("login"), {"login": "tomas", "password": demo.TOMAS_PASSWORD})
    assert tomas.get(reverse("home"))["Location"] == reverse("agents:inbox", kwargs={"tenant": "acme"})


def test_a_second_demo_on_the_running_ones_database_is_refused_and_leaves_it_running(tmp_path: Path) -> None:
    database, port = tmp_path / "demo.sqlite3", free_port()
    first = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--fresh", "--browser", "--port", str(port)],
        cwd=devstack.ROOT,
        env=demo_environ(database, PYTHONUNBUFFERED="1", EMAIL_FILE_PATH=str(tmp_path / "mail")),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        assert first.stdout is not None
        lines.extend(first.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: any(line.startswith("The agent stops and asks Tomas") for line in lines),
            timeout=120,
            what="the first demo to wait on Tomas",
        )

        second = run_demo("--fresh", database=database, environ={})

        assert second.returncode == 1
        assert (
            f"Another demo is running on {database} (pid {first.pid}, serving http://127.0.0.1:{port}): "
            "use it, or stop it (Ctrl-C where it runs) and start this one again."
        ) in second.stderr
        with sqlite3.connect(database) as db:
            assert db.execute(
                "SELECT count(*) FROM agents_question WHERE answered_at IS NULL"
            ).fetchone() == (1,)
        assert first.poll() is None
    finally:
        first.terminate()
        first.wait(timeout=30)
        reader.join(timeout=10)
    # Once it has stopped, the next demo starts, from an empty database.
    again = run_demo("--fresh", database=database, environ={})
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("verdicts match: yes") == 3
