"""The representative face's models moved to the app ``representative``: they leave a2a_gateway's
state here, and ``representative.0001_initial`` takes them over with their tables and rows. No
table is touched here."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("a2a_gateway", "0002_public_endpoint"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="GroundingDocument"),
                migrations.DeleteModel(name="IntakeRequest"),
                migrations.DeleteModel(name="ModelUsage"),
            ],
        ),
    ]
