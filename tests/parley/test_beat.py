"""One beat sends the periodic tasks, however many run: two real beat processes on the test database,
the active one killed with SIGKILL, the standby taking over; and the beat health check."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from parley import devstack
from tests.conftest import LiveStack, run_python, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

SENT = "Scheduler: Sending due task resend-stalled-agent-work"


@dataclass
class Beat:
    process: subprocess.Popen[bytes]
    log: Path

    def sent(self) -> int:
        """How many times this beat has sent the sweep so far."""
        return self.log.read_text().count(SENT)


@pytest.fixture
def two_beats(live_stack: LiveStack, tmp_path: Path) -> Iterator[list[Beat]]:
    """Two beats of one deployment (each with its own schedule file), sweeping every half second."""
    beats = []
    for name in ("a", "b"):
        env = {
            **live_stack.env,
            "CELERY_BEAT_SCHEDULE_FILENAME": str(tmp_path / name / "schedule"),
            "SWEEP_INTERVAL": "0.5",
            "LOG_LEVEL": "INFO",
        }
        log = tmp_path / f"beat-{name}.log"
        beats.append(Beat(devstack.start_beat(env, log.open("w")), log))
    try:
        yield beats
    finally:
        for beat in beats:
            beat.process.kill()
            beat.process.wait(timeout=30)


def test_two_beats_send_the_periodic_tasks_once_and_the_standby_takes_over_when_the_active_dies(
    two_beats: list[Beat], live_stack: LiveStack
) -> None:
    active = wait_until(
        lambda: next((beat for beat in two_beats if beat.sent() >= 4), None), what="a beat sending the sweep"
    )
    standby = next(beat for beat in two_beats if beat is not active)

    assert standby.sent() == 0
    assert run_python("-m", "parley.health", "beat", env=live_stack.env).returncode == 0

    active.process.send_signal(signal.SIGKILL)
    active.process.wait(timeout=30)
    wait_until(lambda: standby.sent() >= 2, what="the standby beat sending the sweep")


def test_the_beat_health_check_fails_while_no_beat_holds_the_lock(live_stack: LiveStack) -> None:
    checked = run_python("-m", "parley.health", "beat", env=live_stack.env)

    assert checked.returncode == 1
    assert '"beat": "no beat holds the beat lock: none is sending the periodic tasks"' in checked.stdout
    assert '"broker": "ok"' in checked.stdout
