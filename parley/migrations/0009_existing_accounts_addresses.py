"""Accounts made before sign-up existed (the admin, createsuperuser) were given their e-mail address by
an operator: it is recorded as verified, so mandatory e-mail verification does not lock them out."""

from django.db import migrations


def verify_existing(apps, schema_editor):
    User = apps.get_model("auth", "User")
    EmailAddress = apps.get_model("account", "EmailAddress")
    taken = {e.lower() for e in EmailAddress.objects.filter(verified=True).values_list("email", flat=True)}
    recorded = set(EmailAddress.objects.values_list("user_id", flat=True))
    for user in User.objects.exclude(email="").order_by("pk"):
        address = user.email.lower()
        if user.pk in recorded or address in taken:
            continue  # an account with addresses of its own, or one another account verified first
        EmailAddress.objects.create(user=user, email=address, verified=True, primary=True)
        taken.add(address)


class Migration(migrations.Migration):
    dependencies = [
        ("parley", "0008_invitation"),
        ("account", "0009_emailaddress_unique_primary_email"),
    ]

    operations = [migrations.RunPython(verify_existing, migrations.RunPython.noop)]
