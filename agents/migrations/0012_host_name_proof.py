"""An agent's host name serves only once proved (agents.services.host_names).

Host names set before proof existed already serve counterparties: they are recorded as proved now, each
with a token of its own, so that upgrading does not take running agents off their hosts (as
parley/migrations/0009 kept existing e-mail addresses verified). They were unique, so no two clash
under the new constraint, which holds only among proved names.
"""

import secrets

from django.db import migrations, models
from django.utils import timezone


def prove_existing(apps, schema_editor):
    rows = apps.get_model("agents", "Agent")._base_manager  # across tenants
    now = timezone.now()
    for pk in rows.exclude(host_name=None).exclude(host_name="").values_list("pk", flat=True):
        rows.filter(pk=pk).update(
            host_name_token=secrets.token_urlsafe(32), host_name_verified_at=now
        )


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0011_list_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="host_name_token",
            field=models.CharField(
                blank=True,
                editable=False,
                help_text="the random token that proves the host name; a new one with each new host name",
                max_length=64,
            ),
        ),
        migrations.AddField(
            model_name="agent",
            name="host_name_verified_at",
            field=models.DateTimeField(
                blank=True,
                editable=False,
                help_text="when the host name was proved; null: not yet, and it serves nothing",
                null=True,
            ),
        ),
        migrations.RunPython(prove_existing, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="agent",
            name="host_name",
            field=models.CharField(
                blank=True,
                help_text="a host name of its own (custom domain or subdomain): card and endpoint at its "
                "root, once proved",
                max_length=253,
                null=True,
            ),
        ),
        migrations.AddConstraint(
            model_name="agent",
            constraint=models.UniqueConstraint(
                condition=models.Q(("host_name_verified_at__isnull", False)),
                fields=("host_name",),
                name="agent_verified_host_name",
            ),
        ),
    ]
