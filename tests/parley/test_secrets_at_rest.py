"""Secrets at rest (parley.encryption): a dump of the database holds no secret in the clear, the app
still signs and sends with them, keys rotate with ``reencrypt_secrets``, and the migration encrypts
the plaintext rows it finds (and decrypts them back when reversed)."""

from __future__ import annotations

import base64
import json
import os
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from a2a.types import AgentCard
from a2a.utils.signing import create_signature_verifier
from cryptography.fernet import Fernet
from django.core import serializers
from django.core.exceptions import FieldError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from jwt import PyJWK

from a2a_gateway.models import A2ATask, PushConfig, SigningKey
from a2a_gateway.push import dispatch_configs
from a2a_gateway.signing import sign_card, signing_key_create
from agents.models import Agent, ModelEndpoint, Tool
from exchange.models import OutboundExchange, PreparedExchange
from negotiations.models import CounterpartyCredential
from parley.encryption import SecretUnreadable, decrypt
from parley.models import Tenant, WebhookEndpoint
from parley.webhooks import endpoints, signing
from tests.conftest import run_python

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()

# Each app's migration before its secrets were encrypted.
BEFORE = [
    ("a2a_gateway", "0005_inbound_context_recency"),
    ("agents", "0012_host_name_proof"),
    ("exchange", "0003_across_tenants_manager"),
    ("negotiations", "0011_board_counts_index"),
    ("parley", "0011_across_tenants_manager"),
]
# Every encrypted column, as (table, column).
COLUMNS = [
    ("a2a_gateway_signingkey", "private_pem"),
    ("a2a_gateway_pushconfig", "data"),
    ("agents_tool", "secret"),
    ("agents_modelendpoint", "api_key"),
    ("negotiations_counterpartycredential", "secret"),
    ("parley_webhookendpoint", "secret"),
    ("exchange_preparedexchange", "request"),
    ("exchange_outboundexchange", "request"),
]


def store_secrets(tenant: Tenant, agent: Agent) -> dict[str, str]:
    """One row of every kind that holds a secret; returns each secret by what holds it."""
    key = signing_key_create(tenant=tenant)
    Tool.objects.create(
        tenant=tenant,
        name="book",
        description="Books it.",
        kind="host",
        url="https://h.test/",
        secret="tool-s3cret-1",
    )
    ModelEndpoint.objects.create(
        tenant=tenant, name="m", base_url="https://m.test/v1", upstream_model="m", api_key="sk-model-s3cret-2"
    )
    CounterpartyCredential.objects.create(tenant=tenant, url_prefix="https://c.test/", secret="cred-s3cret-3")
    webhook = endpoints.webhook_endpoint_create(
        tenant=tenant, url="http://127.0.0.1:9/hook", events=["run.finished"]
    )
    A2ATask.objects.create(
        tenant=tenant, agent=agent, task_id="t-1", owner="key:abc", context_id="c-1", state="x", data={}
    )
    PushConfig.objects.create(
        tenant=tenant,
        agent=agent,
        owner="key:abc",
        task_id="t-1",
        config_id="p-1",
        data={"taskId": "t-1", "id": "p-1", "url": "https://p.test/push", "token": "push-tok3n-4"},
    )
    expires = timezone.now() + timedelta(hours=1)
    PreparedExchange.objects.create(
        tenant=tenant,
        agent=agent,
        caller="key:abc",
        exchange_id="x-1",
        reference="sha256:a",
        request={"delegation": "deleg-tok3n-5", "n": 1},
        expires_at=expires,
    )
    OutboundExchange.objects.create(
        tenant=tenant,
        agent=agent,
        url="https://o.test/",
        exchange_id="x-2",
        reference="sha256:b",
        request={"protected": "protected-v4lue-6"},
    )
    return {
        "signing key": key.private_pem.splitlines()[1],  # a line of the key's base64
        "tool": "tool-s3cret-1",
        "model endpoint": "sk-model-s3cret-2",
        "counterparty credential": "cred-s3cret-3",
        "webhook": webhook.secret,
        "push token": "push-tok3n-4",
        "prepared exchange": "deleg-tok3n-5",
        "outbound exchange": "protected-v4lue-6",
    }


def dump() -> str:
    """Every row of every table, read with a plain cursor, as one text: what a database dump holds."""
    cells = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            cells.extend(str(cell) for row in cursor.fetchall() for cell in row)
    return "\n".join(cells)


def raw(table: str, column: str) -> list[str]:
    with connection.cursor() as cursor:
        name = connection.ops.quote_name
        cursor.execute(f"SELECT {name(column)} FROM {name(table)} WHERE {name(column)} IS NOT NULL")
        return [str(value) for (value,) in cursor.fetchall()]


@pytest.mark.django_db
def test_a_database_dump_holds_no_secret_in_the_clear_and_the_app_still_uses_them(
    tenant: Tenant, agent: Agent
) -> None:
    secrets = store_secrets(tenant, agent)
    # The webhook secret without its prefix, the HMAC key itself, is a secret too.
    secrets["webhook key"] = secrets["webhook"].removeprefix("whsec_")

    dumped = dump()

    assert [what for what, secret in secrets.items() if secret in dumped] == []
    assert "PRIVATE KEY" not in dumped
    for table, column in COLUMNS:
        [stored] = raw(table, column)
        assert stored.startswith("gAAAAA")  # a Fernet token: version byte 0x80, then the time
        assert decrypt(stored)
    # The app reads them back and uses them: a webhook signature, a card signature, a push config.
    endpoint = WebhookEndpoint.across_tenants.get()
    assert signing.sign(secret=endpoint.secret, msg_id="msg_1", timestamp=1, body=b"{}") == signing.sign(
        secret=secrets["webhook"], msg_id="msg_1", timestamp=1, body=b"{}"
    )
    key = SigningKey.across_tenants.get()
    signed = sign_card(AgentCard(name="Tomas", version="1"), key, jku="https://j.test/jwks.json")
    create_signature_verifier(lambda kid, jku: PyJWK(key.public_jwk), ["ES256"])(signed)
    [config] = dispatch_configs("t-1")
    assert (config.url, config.token) == ("https://p.test/push", "push-tok3n-4")
    assert Tool.across_tenants.get().secret == "tool-s3cret-1"
    assert ModelEndpoint.across_tenants.get().api_key == "sk-model-s3cret-2"
    assert CounterpartyCredential.across_tenants.get().secret == "cred-s3cret-3"
    assert PreparedExchange.across_tenants.get().request == {"delegation": "deleg-tok3n-5", "n": 1}
    assert OutboundExchange.across_tenants.exclude(request=None).get().request == {
        "protected": "protected-v4lue-6"
    }


@pytest.mark.django_db
def test_an_empty_secret_is_encrypted_and_a_request_set_to_none_is_null(tenant: Tenant, agent: Agent) -> None:
    tool = Tool.objects.create(tenant=tenant, name="ask", description="Asks.", kind="builtin")
    sent = OutboundExchange.objects.create(
        tenant=tenant,
        agent=agent,
        url="https://o.test/",
        exchange_id="x-2",
        reference="sha256:b",
        request={"a": 1},
    )

    OutboundExchange.across_tenants.filter(pk=sent.pk).update(request=None)

    assert Tool.across_tenants.get(pk=tool.pk).secret == ""
    assert raw("agents_tool", "secret")[0].startswith("gAAAAA")  # "no secret" is not told apart either
    assert OutboundExchange.across_tenants.get().request is None
    assert raw("exchange_outboundexchange", "request") == []


@pytest.mark.django_db
def test_an_encrypted_column_is_compared_with_none_alone(tenant: Tenant) -> None:
    with pytest.raises(FieldError, match="stored encrypted: it can be compared with None alone"):
        list(Tool.across_tenants.filter(secret="tool-s3cret-1"))
    with pytest.raises(FieldError, match="Unsupported lookup 'startswith'"):
        list(Tool.across_tenants.filter(secret__startswith="tool"))

    assert list(OutboundExchange.across_tenants.filter(request=None)) == []


@pytest.mark.django_db
def test_keys_rotate_and_reencrypt_secrets_moves_every_value_to_the_first_key(
    settings: Any, tenant: Tenant, agent: Agent
) -> None:
    settings.FIELD_ENCRYPTION_KEYS = [KEY_B]
    secrets = store_secrets(tenant, agent)
    settings.FIELD_ENCRYPTION_KEYS = [KEY_A, KEY_B]
    assert Tool.across_tenants.get().secret == "tool-s3cret-1"  # an old row still reads

    first, second = StringIO(), StringIO()
    call_command("reencrypt_secrets", stdout=first)
    call_command("reencrypt_secrets", stdout=second)

    assert "agents.Tool.secret: 1 re-encrypted, 0 already under the first key" in first.getvalue()
    assert "a2a_gateway.PushConfig.data: 1 re-encrypted, 0 already under the first key" in first.getvalue()
    assert first.getvalue().splitlines()[-1] == (
        f"{len(COLUMNS)} values re-encrypted; every secret is now under the first key."
    )
    assert "agents.Tool.secret: 0 re-encrypted, 1 already under the first key" in second.getvalue()
    assert second.getvalue().splitlines()[-1].startswith("0 values re-encrypted")
    settings.FIELD_ENCRYPTION_KEYS = [KEY_A]  # B is gone
    assert Tool.across_tenants.get().secret == "tool-s3cret-1"
    assert ModelEndpoint.across_tenants.get().api_key == "sk-model-s3cret-2"
    assert CounterpartyCredential.across_tenants.get().secret == "cred-s3cret-3"
    assert WebhookEndpoint.across_tenants.get().secret == secrets["webhook"]
    assert SigningKey.across_tenants.get().private_pem.splitlines()[1] == secrets["signing key"]
    assert PushConfig.across_tenants.get().data["token"] == "push-tok3n-4"
    assert PreparedExchange.across_tenants.get().request["delegation"] == "deleg-tok3n-5"
    assert OutboundExchange.across_tenants.get().request == {"protected": "protected-v4lue-6"}


@pytest.mark.django_db
def test_a_value_no_key_opens_is_refused_never_passed_on_as_the_secret(settings: Any, tenant: Tenant) -> None:
    settings.FIELD_ENCRYPTION_KEYS = [KEY_B]
    Tool.objects.create(
        tenant=tenant, name="book", description="Books it.", kind="host", secret="tool-s3cret-1"
    )
    settings.FIELD_ENCRYPTION_KEYS = [KEY_A]

    with pytest.raises(SecretUnreadable, match=r"agents\.Tool\.secret cannot be decrypted with any key"):
        Tool.across_tenants.get()
    out = StringIO()
    with pytest.raises(
        CommandError, match=r"open with no key of FIELD_ENCRYPTION_KEYS, in agents.Tool.secret:"
    ):
        call_command("reencrypt_secrets", stdout=out)
    assert (
        "agents.Tool.secret: 0 re-encrypted, 0 already under the first key, 1 opened by no key"
        in out.getvalue()
    )


@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_the_plaintext_it_finds_and_decrypts_it_when_reversed(
    tenant: Tenant, agent: Agent
) -> None:
    secrets = store_secrets(tenant, agent)
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(BEFORE)

        plain = dump()
        assert [what for what, secret in secrets.items() if secret not in plain] == []
        assert [
            value for table, column in COLUMNS for value in raw(table, column) if value.startswith("gAAAAA")
        ] == []

        executor = MigrationExecutor(connection)
        executor.migrate(leaves)
    finally:
        MigrationExecutor(connection).migrate(leaves)

    dumped = dump()
    assert [what for what, secret in secrets.items() if secret in dumped] == []
    assert Tool.across_tenants.get().secret == "tool-s3cret-1"
    assert PushConfig.across_tenants.get().data["token"] == "push-tok3n-4"
    assert SigningKey.across_tenants.get().private_pem.splitlines()[1] == secrets["signing key"]
    assert base64.b64decode(WebhookEndpoint.across_tenants.get().secret.removeprefix("whsec_"))


@pytest.mark.django_db
def test_a_push_config_goes_through_djangos_serializers_as_json(tenant: Tenant, agent: Agent) -> None:
    data = {"taskId": "t-1", "id": "p-1", "url": "https://p.test/push", "token": "push-tok3n-4"}
    PushConfig.objects.create(
        tenant=tenant, agent=agent, owner="key:abc", task_id="t-1", config_id="p-1", data=data
    )

    written = serializers.serialize("json", PushConfig.across_tenants.all())
    [read] = serializers.deserialize("json", written)

    assert json.loads(written)[0]["fields"]["data"] == data
    assert read.object.data == data


# In processes of their own, with the keys in their environment: store a tool's secret, read it back.
STORE = """
import django
django.setup()
from agents.models import Tool
from parley.models import Tenant
tenant = Tenant.objects.create(slug="acme", name="Acme")
Tool.objects.create(tenant=tenant, name="book", description="Books it.", kind="host", secret="tool-s3cret-1")
"""
READ = """
import django
django.setup()
from agents.models import Tool
print(Tool.across_tenants.get().secret)
"""


def test_keys_from_the_environment_rotate_with_reencrypt_secrets(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FIELD_ENCRYPTION_KEYS"}
    env.update(
        DJANGO_SETTINGS_MODULE="parley.settings.base",
        DATABASE_URL=f"sqlite:///{tmp_path / 'keys.sqlite3'}",
        REDIS_URL="",
    )
    under_b, under_a_b, under_a = (
        {**env, "FIELD_ENCRYPTION_KEYS": keys} for keys in (KEY_B, f"{KEY_A},{KEY_B}", KEY_A)
    )
    run_python("manage.py", "migrate", "-v0", env=under_b, check=True)
    run_python("-c", STORE, env=under_b, check=True)

    rotated = run_python("manage.py", "reencrypt_secrets", env=under_a_b, check=True)
    read = run_python("-c", READ, env=under_a)
    refused = run_python("-c", READ, env=under_b)

    assert "agents.Tool.secret: 1 re-encrypted, 0 already under the first key" in rotated.stdout
    assert read.stdout.strip() == "tool-s3cret-1"
    assert refused.returncode != 0
    assert "SecretUnreadable: agents.Tool.secret cannot be decrypted with any key" in refused.stderr
