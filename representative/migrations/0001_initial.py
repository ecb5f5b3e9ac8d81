"""The representative face's models, taken over from a2a_gateway (its 0003 let them go) with their rows.

On a fresh database a2a_gateway's 0002 has made the tables; on an existing one they hold its
rows. Either way the state first takes them as they are (a2a_gateway's table and index names),
then they are renamed to this app's own names: a rename in place, no row copied. Their content
types move too, so the admin's permissions and history of these models stay theirs.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MOVED = ["groundingdocument", "intakerequest", "modelusage"]


def content_types_to(source, target):
    """Move the content types of :data:`MOVED` from app ``source`` to ``target`` (but for one the target
    has already: post_migrate made it)."""

    def move(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        types = ContentType.objects.using(schema_editor.connection.alias)
        made = set(types.filter(app_label=target, model__in=MOVED).values_list("model", flat=True))
        types.filter(app_label=source, model__in=set(MOVED) - made).update(app_label=target)

    return move


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("a2a_gateway", "0003_representative_face"),
        ("agents", "0009_question_tool_run_at"),
        ("parley", "0010_invitation_for_member"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="GroundingDocument",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        ("title", models.CharField(max_length=200)),
                        ("text", models.TextField()),
                        ("agent", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="grounding_documents", to="agents.agent")),
                        ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="parley.tenant")),
                    ],
                    options={
                        "ordering": ["title"],
                        "db_table": "a2a_gateway_groundingdocument",
                    },
                ),
                migrations.CreateModel(
                    name="IntakeRequest",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        ("caller", models.CharField(help_text="the task owner that left it", max_length=500)),
                        ("summary", models.CharField(max_length=500)),
                        ("details", models.TextField(blank=True)),
                        ("notified_at", models.DateTimeField(blank=True, null=True)),
                        ("notify_error", models.CharField(blank=True, max_length=500)),
                        ("agent", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="intake_requests", to="agents.agent")),
                        ("recipient", models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL)),
                        ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="parley.tenant")),
                    ],
                    options={
                        "ordering": ["-created_at"],
                        "db_table": "a2a_gateway_intakerequest",
                    },
                ),
                migrations.CreateModel(
                    name="ModelUsage",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        ("model", models.CharField(max_length=200)),
                        ("input_tokens", models.PositiveIntegerField(default=0)),
                        ("output_tokens", models.PositiveIntegerField(default=0)),
                        ("cost", models.DecimalField(decimal_places=6, default=0, max_digits=14)),
                        ("agent", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="agents.agent")),
                        ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="parley.tenant")),
                    ],
                    options={
                        "indexes": [models.Index(fields=["tenant", "created_at"], name="a2a_gateway_tenant__4cbce4_idx")],
                        "db_table": "a2a_gateway_modelusage",
                    },
                ),
            ],
        ),
        migrations.AlterModelTable(name="groundingdocument", table=None),
        migrations.AlterModelTable(name="intakerequest", table=None),
        migrations.AlterModelTable(name="modelusage", table=None),
        migrations.RenameIndex(
            model_name="modelusage",
            new_name="representat_tenant__a1199b_idx",
            old_name="a2a_gateway_tenant__4cbce4_idx",
        ),
        migrations.RunPython(
            content_types_to("a2a_gateway", "representative"),
            content_types_to("representative", "a2a_gateway"),
        ),
    ]
