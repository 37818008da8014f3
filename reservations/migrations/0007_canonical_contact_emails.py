"""Orders' contact addresses in their canonical form (infra.identity), so that a guest order
is attached only to the account whose address is exactly that one."""

from django.db import migrations

from infra.identity import NotAnAddress, canonical_email


def canonical_addresses(apps, schema_editor):
    Order = apps.get_model("reservations", "Order")
    for order in Order.objects.all().only("pk", "contact_email").iterator():
        try:
            email = canonical_email(order.contact_email)
        except NotAnAddress:
            continue  # never matches an account: its guest link still opens it
        if email != order.contact_email:
            Order.objects.filter(pk=order.pk).update(contact_email=email)


class Migration(migrations.Migration):
    dependencies = [("reservations", "0006_order_ending_mail")]

    operations = [migrations.RunPython(canonical_addresses, migrations.RunPython.noop)]
