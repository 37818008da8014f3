"""The order's model shape (sequence length, micro-batch) for the acceptance benchmark, and
the acceptance references with each hardware kind (issue 12).

Kinds already in the database with the catalogue's slugs get the datasheet figures the
catalogue loads (reservations/catalogue.py ACCEPTANCE, copied here: a migration keeps the
figures of its day); other kinds keep empty references (not checked) until the operator
fills them in.
"""

from typing import Any

import django.core.validators
from django.db import migrations, models

import reservations.models

FIGURES: dict[str, dict[str, Any]] = {
    "b200": {
        "accept_sku": "B200",
        "accept_memory_gib": 180,
        "accept_bf16_tflops": 2250,
        "accept_fp8_tflops": 4500,
        "accept_hbm_tbps": 8.0,
        "accept_busbw_gbps_min": 600,
        "accept_min_torch": "2.7",
        "accept_min_cuda": "12.8",
        "accept_min_driver": "570",
    },
    "h200": {
        "accept_sku": "H200",
        "accept_memory_gib": 141,
        "accept_bf16_tflops": 989,
        "accept_fp8_tflops": 1979,
        "accept_hbm_tbps": 4.8,
        "accept_busbw_gbps_min": 300,
        "accept_min_torch": "2.4",
        "accept_min_cuda": "12.4",
        "accept_min_driver": "550",
    },
    "mi300x": {
        "accept_sku": "MI300X",
        "accept_memory_gib": 192,
        "accept_bf16_tflops": 1307.4,
        "accept_fp8_tflops": 2614.9,
        "accept_hbm_tbps": 5.3,
        "accept_busbw_gbps_min": 40,
        "accept_min_torch": "2.4",
        "accept_min_rocm": "6.2",
    },
}


def datasheet_figures(apps: Any, schema_editor: Any) -> None:
    kinds = apps.get_model("reservations", "HardwareKind")
    for slug, figures in FIGURES.items():
        kinds.objects.filter(slug=slug).update(**figures)


class Migration(migrations.Migration):
    dependencies = [
        ("reservations", "0009_lot_invariants"),
    ]

    operations = [
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_bf16_tflops",
            field=models.FloatField(
                blank=True,
                null=True,
                validators=[django.core.validators.MinValueValidator(0)],
                verbose_name="BF16 dense peak (TFLOP/s)",
            ),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_busbw_gbps_min",
            field=models.FloatField(
                blank=True,
                help_text="At the largest message size, as nccl-tests reports busbw (10⁹ bytes/s)",
                null=True,
                validators=[django.core.validators.MinValueValidator(0)],
                verbose_name="all-reduce bus bandwidth, least (GB/s)",
            ),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_card_tolerance",
            field=models.FloatField(
                default=0.1,
                help_text="0.1: the two cards' matrix product and HBM figures within 10 %",
                validators=[reservations.models._share],
                verbose_name="tolerance between the two cards",
            ),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_ecc_required",
            field=models.BooleanField(default=True, verbose_name="ECC required"),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_fp8_tflops",
            field=models.FloatField(
                blank=True,
                help_text="Empty: FP8 not supported or not checked",
                null=True,
                validators=[django.core.validators.MinValueValidator(0)],
                verbose_name="FP8 dense peak (TFLOP/s)",
            ),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_hbm_share_min",
            field=models.FloatField(
                default=0.7,
                validators=[reservations.models._share],
                verbose_name="HBM bandwidth, least share of the datasheet",
            ),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_hbm_tbps",
            field=models.FloatField(
                blank=True,
                null=True,
                validators=[django.core.validators.MinValueValidator(0)],
                verbose_name="HBM bandwidth (TB/s)",
            ),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_matmul_share_min",
            field=models.FloatField(
                default=0.6,
                validators=[reservations.models._share],
                verbose_name="matrix product, least share of peak",
            ),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_memory_gib",
            field=models.FloatField(
                blank=True,
                help_text="Per card, GiB (2³⁰ bytes)",
                null=True,
                validators=[django.core.validators.MinValueValidator(0)],
                verbose_name="nameplate memory (GiB)",
            ),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_memory_share_min",
            field=models.FloatField(
                default=0.9,
                validators=[reservations.models._share],
                verbose_name="usable memory, least share of nameplate",
            ),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_mig_allowed",
            field=models.BooleanField(default=False, verbose_name="MIG allowed"),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_min_cuda",
            field=models.CharField(blank=True, max_length=16, verbose_name="least CUDA"),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_min_driver",
            field=models.CharField(blank=True, max_length=16, verbose_name="least driver"),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_min_rocm",
            field=models.CharField(blank=True, max_length=16, verbose_name="least ROCm"),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_min_torch",
            field=models.CharField(blank=True, max_length=16, verbose_name="least PyTorch"),
        ),
        migrations.AddField(
            model_name="hardwarekind",
            name="accept_sku",
            field=models.CharField(
                blank=True,
                help_text="A part of the name NVML or the driver reports, e.g. H200",
                max_length=40,
                verbose_name="expected device name",
            ),
        ),
        migrations.AddField(
            model_name="order",
            name="model_micro_batch",
            field=models.PositiveIntegerField(
                default=1,
                help_text="Samples per card and step",
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(4096),
                ],
            ),
        ),
        migrations.AddField(
            model_name="order",
            name="model_seq_len",
            field=models.PositiveIntegerField(
                default=2048,
                help_text="Tokens per sample the acceptance benchmark's model is shaped with",
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(1048576),
                ],
            ),
        ),
        migrations.RunPython(datasheet_figures, migrations.RunPython.noop),
    ]
