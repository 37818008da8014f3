"""Accounts' addresses in their canonical form (infra.identity), the one every look-up now
compares exactly. An address with no canonical form, or whose canonical form another account
already has, is left as it is and said here: it can no longer sign in by link until the
operator settles it."""

from django.db import IntegrityError, migrations, transaction

from infra.identity import NotAnAddress, canonical_email


def canonical_addresses(apps, schema_editor):
    User = apps.get_model("accounts", "User")
    for user in User.objects.all().only("pk", "email"):
        try:
            email = canonical_email(user.email)
        except NotAnAddress:
            print(f"\n  account {user.pk}: {user.email!r} has no canonical form; left as it is")
            continue
        if email == user.email:
            continue
        try:
            with transaction.atomic():
                User.objects.filter(pk=user.pk).update(email=email)
        except IntegrityError:
            print(f"\n  account {user.pk}: {email} is another account's already; left as it is")


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]

    operations = [migrations.RunPython(canonical_addresses, migrations.RunPython.noop)]
