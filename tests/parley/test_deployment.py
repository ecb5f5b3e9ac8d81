"""The container deployment (docker/): the Compose file is valid against the Compose Specification's
schema, every service is health-checked, the image's entrypoint and the services' commands are the
roles of :mod:`parley.processes`, and docker/.env.example names every variable the file needs.

No Docker engine runs where the suite runs: the roles' commands themselves are run as processes by
the tests that start the live stack (:mod:`parley.devstack` starts ``python -m parley.processes``), and
here the ``migrate`` role migrates an empty database.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest
import yaml

from parley import devstack, processes
from tests.conftest import database_url, run_python
from tests.parley.test_settings_doc import documented

DOCKER = devstack.ROOT / "docker"
SCHEMA = devstack.ROOT / "docs" / "schemas" / "compose-spec.json"
# The services that run Parley's image, and the role each runs.
ROLES = {"migrate": "migrate", "web": "web", "worker": "worker", "beat": "beat"}
# Variables docker/compose.yaml itself reads from docker/.env, not Parley's settings.
COMPOSE_ONLY = {"PARLEY_HOST", "ACME_EMAIL", "POSTGRES_PASSWORD"}


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return loaded


def example_variables() -> list[str]:
    return re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=", (DOCKER / ".env.example").read_text(), re.MULTILINE)


def test_the_compose_file_is_valid_against_the_compose_specification() -> None:
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))

    assert [error.message for error in validator.iter_errors(compose())] == []


def test_the_schema_check_finds_what_is_wrong() -> None:
    broken = compose()
    broken["services"]["web"]["stop_grace"] = "30s"
    broken["services"]["worker"]["healthcheck"]["interval"] = 30
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))

    errors = sorted((list(e.absolute_path), e.message) for e in validator.iter_errors(broken))

    assert errors == [
        (["services", "web"], "'stop_grace' does not match any of the regexes: '^x-'"),
        (["services", "worker", "healthcheck", "interval"], "30 is not of type 'string'"),
    ]


def test_every_service_has_a_health_check() -> None:
    services = compose()["services"]

    assert {
        name for name, service in services.items() if not service.get("healthcheck", {}).get("test")
    } == set()
    assert [name for name, service in services.items() if service["healthcheck"].get("disable")] == []


def test_the_image_runs_the_roles_of_parley_processes_and_each_service_names_its_role() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    services = compose()["services"]

    assert 'ENTRYPOINT ["python", "-m", "parley.processes"]' in dockerfile
    assert {name: services[name]["command"] for name in ROLES} == {
        name: [role] for name, role in ROLES.items()
    }
    assert set(ROLES.values()) == set(processes.ROLES)
    assert services["web"]["deploy"]["replicas"] == 2
    assert "deploy" not in services["beat"]  # one beat; more would only wait as standbys


def test_web_and_workers_start_after_the_migration_has_finished() -> None:
    services = compose()["services"]

    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert services["migrate"]["restart"] == "no"


def test_the_environment_example_names_every_variable_the_compose_file_needs_and_only_settings() -> None:
    needed = set(re.findall(r"\$\{([A-Z_]+):\?", (DOCKER / "compose.yaml").read_text()))
    listed = example_variables()
    settings_table = documented()

    assert needed - set(listed) == set()
    assert [name for name in listed if name not in settings_table and name not in COMPOSE_ONLY] == []
    # What production settings refuse to start without.
    assert {"SECRET_KEY", "FIELD_ENCRYPTION_KEYS"} <= set(listed)


def test_no_secret_is_written_into_the_compose_file_or_the_image() -> None:
    text = (DOCKER / "compose.yaml").read_text()
    environment = compose()["x-parley"]["environment"]

    assert "SECRET_KEY" not in text
    assert environment["DATABASE_URL"].startswith("postgres://parley:${POSTGRES_PASSWORD:?")
    assert "env_file" in compose()["x-parley"]


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A new, empty Postgres database; its URL."""
    url = database_url()
    name = url.rsplit("/", 1)[1] + "_deploy"
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield url.rsplit("/", 1)[0] + f"/{name}"
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_migrate_role_migrates_an_empty_database(empty_database: str) -> None:
    env = {"DJANGO_SETTINGS_MODULE": "parley.settings.base", "DATABASE_URL": empty_database, "REDIS_URL": ""}
    env = {**os.environ, **env}

    migrated = run_python("-m", "parley.processes", "migrate", env=env)
    checked = run_python("manage.py", "migrate", "--check", env=env)

    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert "Applying parley.0001_initial... OK" in migrated.stdout
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_an_unknown_role_is_refused_with_the_roles_named() -> None:
    refused = run_python("-m", "parley.processes", "serve", env=dict(os.environ))

    assert refused.returncode == 2
    assert refused.stderr.strip() == "usage: python -m parley.processes {migrate,web,worker,beat}"


def test_the_images_collectstatic_step_runs_under_production_settings_with_its_build_only_values(
    tmp_path: Path,
) -> None:
    step = re.search(r"^RUN (DJANGO_SETTINGS_MODULE=.*?collectstatic --noinput)$", dockerfile_steps(), re.M)
    assert step is not None
    *assignments, command = re.split(r"\s+(?=python )", step[1])
    build_env = dict(pair.split("=", 1) for pair in assignments[0].split())
    env = {**os.environ, **build_env, "STATIC_ROOT": str(tmp_path / "static"), "DATABASE_URL": "sqlite://"}

    collected = run_python(*command.split()[1:], env=env)

    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert list((tmp_path / "static").glob("parley/parley.*.css"))


def dockerfile_steps() -> str:
    """docker/Dockerfile with its continued lines joined."""
    return (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
