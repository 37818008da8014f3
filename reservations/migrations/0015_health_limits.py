"""The kinds' health limit: 90 °C, and 105 °C for MI300X (amd-smi reads the hotspot),
as reservations/catalogue.py loads it for a new catalogue."""

import django.core.validators
from django.db import migrations, models


def hotspot_for_amd(apps, schema_editor):
    kind = apps.get_model("reservations", "HardwareKind")
    kind.objects.filter(slug="mi300x").update(health_max_temperature_c=105)


class Migration(migrations.Migration):
    dependencies = [
        ("reservations", "0014_incidents_and_credits"),
    ]

    operations = [
        migrations.AddField(
            model_name="hardwarekind",
            name="health_max_temperature_c",
            field=models.PositiveSmallIntegerField(
                default=90,
                help_text="During the window, a card reading hotter (GPU temperature; AMD: hotspot) is an incident",
                validators=[django.core.validators.MinValueValidator(40)],
                verbose_name="hottest a card may run (°C)",
            ),
        ),
        migrations.AlterField(
            model_name="incident",
            name="kind",
            field=models.CharField(
                choices=[
                    ("acceptance", "acceptance benchmark not passed"),
                    ("cards", "cards missing or not the ones accepted"),
                    ("xid", "GPU error (XID)"),
                    ("ecc", "memory errors (ECC)"),
                    ("thermal", "overheating or throttled"),
                    ("unreachable", "host not reachable"),
                ],
                max_length=12,
            ),
        ),
        migrations.RunPython(hotspot_for_amd, migrations.RunPython.noop),
    ]
