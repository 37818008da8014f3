import secrets

from django.db import migrations, models


def give_every_order_a_secret(apps, schema_editor):
    Order = apps.get_model("reservations", "Order")
    for order in Order.objects.filter(secret="").only("pk"):
        order.secret = secrets.token_urlsafe(16)
        order.save(update_fields=["secret"])


class Migration(migrations.Migration):
    dependencies = [("reservations", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="order",
            name="secret",
            field=models.CharField(
                default="",
                editable=False,
                help_text="The key in the order page's link; the reference alone opens nothing",
                max_length=32,
            ),
            preserve_default=False,
        ),
        migrations.RunPython(give_every_order_a_secret, migrations.RunPython.noop),
    ]
