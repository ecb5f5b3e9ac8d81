"""``manage.py demo``: run "Bring in a fractional CFO" on a real server on loopback and print the result.

On the ``offline`` model by default (no key, no network); ``--model-url``, ``--model`` and
``--model-key-env`` put every agent on one chat-completions model instead.

Scripted, Tomas gives :data:`ANSWER`, and the command fails unless the run is done and its
settlements meet the demo's bar (distinct outcomes, matching verdicts). With ``--browser`` Tomas
answers in the browser, so his answer may change the outcome: how the run ended and whether the
bar is met are reported, and the server keeps serving either way.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import uvicorn
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from agents.addresses import agent_url
from agents.models import Question, Run
from agents.services import questions, runs
from negotiations import demo
from parley.mail import local_mail_note

ANSWER = "Up to €1,100 a day."


class Command(BaseCommand):
    help = "Run the fractional-CFO demo end to end on the embedded default and print every settlement."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
        parser.add_argument("--browser", action="store_true", help="wait for Tomas to answer in the browser")
        parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for each stage")
        parser.add_argument(
            "--fresh",
            action="store_true",
            help="start from an empty database: delete the SQLite file DATABASE_URL names first (make demo "
            "does); refused for any other database",
        )
        parser.add_argument(
            "--model-url",
            default="",
            help="base URL of an OpenAI-compatible chat-completions endpoint (with --model): every agent "
            "runs on it instead of offline, e.g. https://openrouter.ai/api/v1",
        )
        parser.add_argument(
            "--model", default="", help="the model id that endpoint serves (with --model-url)"
        )
        parser.add_argument(
            "--model-key-env",
            default="",
            help="the environment variable holding the endpoint's API key (omit for one that takes none)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        model = _model(options)
        port = options["port"] or _free_port()
        base = f"http://127.0.0.1:{port}"
        sqlite = _sqlite_file()
        if options["fresh"] and sqlite is None:
            raise CommandError(f"--fresh deletes a SQLite file; DATABASE_URL names {_database_label()}.")
        # Held until this process ends: another demo would re-seed (or, --fresh, delete) this database.
        self.database_lock = _hold_database(f"pid {os.getpid()}, serving {base}")
        if options["fresh"] and sqlite is not None:
            _sqlite_delete(sqlite)
        settings.PUBLIC_BASE_URL = base
        call_command("migrate", verbosity=0)
        world = demo.demo_seed(model)
        server = _serve(port)
        self.stdout.write(
            f"Parley is serving on {base} (in-process worker, {settings.DATABASES['default']['ENGINE']})."
        )
        self.stdout.write(
            f"Acme's operator (agents, tools, models): log in at {base}/login/ as {demo.OPERATOR_USERNAME}, "
            f"password {demo.OPERATOR_PASSWORD}."
        )
        if options["browser"]:
            self.stdout.write(f"To start an organisation of your own, sign up at {base}/signup/")
        note = local_mail_note()
        if note:
            self.stdout.write(note)
        if model is None:
            self.stdout.write("Every agent runs on the offline model: no key, no network.")
        else:
            key = f"key from ${options['model_key_env']}" if model.api_key else "no key"
            self.stdout.write(f"Every agent runs on the model {model.name} at {model.base_url} ({key}).")
        urls = [agent_url(a) for a in world.cfo_agents]
        run = runs.run_start(agent=world.tomas_agent, intent=world.intent, task=demo.demo_task(urls))
        self.stdout.write(f"Tomas's agent starts: {demo.demo_task(urls)}\n")

        run = self._wait(run, {Run.Status.NEEDS_INPUT}, options["timeout"])
        question = Question.objects.for_tenant(run.tenant_id).get(run=run, answered_at=None)
        self.stdout.write(f"The agent stops and asks Tomas: {question.question}")
        if options["browser"]:
            self.stdout.write(
                f"Answer it in the browser: {base}/login/ (user tomas, password {demo.TOMAS_PASSWORD})"
            )
            # Tomas may answer anything, so however the run ends is reported, not raised.
            run = self._wait(run, set(Run.ENDED), None)
        else:
            tomas = get_user_model().objects.get(username="tomas")
            answered = questions.question_answer(question=question, answer=ANSWER, user=tomas)
            self.stdout.write(f"Tomas answers: {ANSWER}")
            if answered.understood is not None:
                self.stdout.write(answered.understood.message)
            self.stdout.write("")
            run = self._wait(
                run, {Run.Status.DONE, Run.Status.MAX_STEPS, Run.Status.FAILED}, options["timeout"]
            )
        if run.status == Run.Status.DONE:
            self.stdout.write("The run is done. Its report:\n")
            self.stdout.write(run.output + "\n")
            self._print_usage(demo.demo_usage(world, run))
            failed = self._print_pairs(demo.demo_pairs(world))
        else:
            failed = f"The run ended {run.status}: {run.end_reason}"
        if failed and not options["browser"]:
            raise CommandError(failed)
        if failed:
            self.stdout.write(f"\n{failed}")
        if options["browser"]:
            self.stdout.write(f"\nStill serving on {base} so you can look around; press Ctrl-C to stop.")
            try:
                while True:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
        server.should_exit = True

    def _wait(self, run: Run, statuses: set[str], timeout: float | None) -> Run:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            run.refresh_from_db()
            if run.status in statuses:
                return run
            if run.status in (Run.Status.FAILED, Run.Status.MAX_STEPS, Run.Status.CANCELLED):
                raise CommandError(f"The run ended {run.status}: {run.end_reason}")
            if deadline is not None and time.monotonic() > deadline:
                raise CommandError(f"Timed out waiting; the run is {run.status}.")
            time.sleep(0.2)

    def _print_usage(self, usage: demo.DemoUsage) -> None:
        moves = (
            f"{', '.join(usage.turn_models)} decided {usage.model_moves} negotiation moves"
            if usage.turn_models
            else "the offline strategy decided every negotiation move"
        )
        self.stdout.write(
            f"Models used: {', '.join(usage.run_models) or 'none'} answered the run's steps; {moves}; "
            f"{usage.input_tokens} tokens in, {usage.output_tokens} out.\n"
        )

    def _print_pairs(self, pairs: list[demo.SidePair]) -> str:
        """Print each settlement as both sides recorded it; returns why they miss the demo's bar
        (distinct outcomes, matching verdicts), "" when they meet it."""
        self.stdout.write("Settlements, as each side recorded them:")
        for pair in pairs:
            self.stdout.write(f"\n  {pair.counterparty}")
            for side, s in (("acme (Tomas)", pair.ours), ("cfo-guild", pair.theirs)):
                if s is None:
                    self.stdout.write(f"    {side:13} no settlement recorded")
                    continue
                terms = f" terms={s.terms}" if s.terms else ""
                self.stdout.write(f"    {side:13} {s.outcome} (basis {s.basis}){terms} — {s.reason}")
            self.stdout.write(f"    verdicts match: {'yes' if pair.verdicts_match else 'NO'}")
        outcomes = [p.ours.outcome for p in pairs if p.ours]
        if not all(p.verdicts_match for p in pairs) or len(set(outcomes)) != len(pairs):
            return "The demo's settlements do not meet its bar (distinct outcomes, matching verdicts)."
        return ""


def _model(options: dict[str, Any]) -> demo.DemoModel | None:
    """The model the flags name, None for ``offline``; refused with the reason before anything starts."""
    url, name, key_env = options["model_url"], options["model"], options["model_key_env"]
    if not (url or name or key_env):
        return None
    if not (url and name):
        raise CommandError("Give --model-url and --model together (and --model-key-env if it needs a key).")
    try:
        return demo.demo_model(url=url, name=name, key_env=key_env, environ=os.environ)
    except demo.DemoModelError as exc:
        raise CommandError(str(exc)) from exc


def _sqlite_file() -> str | None:
    """The file of the demo's database when it is SQLite, else None."""
    db = settings.DATABASES["default"]
    return str(db["NAME"]) if db["ENGINE"] == "django.db.backends.sqlite3" else None


def _database_label() -> str:
    """The demo's database as a person names it: the SQLite file, or ``host:port/name``."""
    db = settings.DATABASES["default"]
    return _sqlite_file() or f"{db.get('HOST') or 'localhost'}:{db.get('PORT') or ''}/{db['NAME']}"


def _hold_database(holder: str) -> IO[str]:
    """Lock the demo's database for this process and write ``holder`` (who holds it) in the lock file:
    ``<the SQLite file>.lock``, or, for another database, a file in the system's temporary directory
    named after it. The lock is the open file's (``flock``): the kernel releases it when the process
    ends, however it ends. Keep the returned file open.

    Raises:
        CommandError: another demo holds it; the message names the database and that demo.
    """
    sqlite = _sqlite_file()
    if sqlite is not None:
        path = Path(f"{sqlite}.lock")
    else:
        digest = hashlib.sha256(_database_label().encode()).hexdigest()[:12]
        path = Path(tempfile.gettempdir()) / f"parley-demo-{digest}.lock"
    # Opened without truncating: the holder's line must survive a refused demo's open.
    lock = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+", encoding="utf-8")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        running = lock.read().strip() or "it is starting"
        lock.close()
        raise CommandError(
            f"Another demo is running on {_database_label()} ({running}): use it, or stop it (Ctrl-C "
            "where it runs) and start this one again."
        ) from None
    lock.truncate(0)
    lock.write(holder + "\n")
    lock.flush()
    return lock


def _sqlite_delete(name: str) -> None:
    """Delete the SQLite database ``name`` and its journals, so the demo starts from an empty one."""
    connection.close()
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{name}{suffix}").unlink(missing_ok=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(port: int) -> uvicorn.Server:
    server = uvicorn.Server(
        uvicorn.Config(
            "parley.asgi:application",
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
        )
    )
    threading.Thread(target=server.run, name="parley-demo-server", daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise CommandError("The server did not start within 30 s.")
        time.sleep(0.05)
    return server
