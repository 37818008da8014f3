"""30-day campaigns as records (issue 14): dated checkpoints with their reminder stamp and
outcome, and early-end requests. Orders booked before keep their free-text plan in
``Order.checkpoints``; the order page shows it as it was written (it has no dates to
remind on), so no data is moved.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('reservations', '0010_model_shape'),
    ]

    operations = [
        migrations.CreateModel(
            name='Checkpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('position', models.PositiveSmallIntegerField()),
                ('due_on', models.DateField(help_text='The day of the checkpoint (UTC), within the window')),
                ('what', models.CharField(help_text='What is checked that day', max_length=300)),
                ('reminder_sent_at', models.DateTimeField(blank=True, null=True)),
                ('outcome', models.CharField(blank=True, choices=[('continue', 'Continue as planned'), ('adjust', 'Continue, adjusted'), ('stop', 'Stop the campaign')], max_length=10)),
                ('outcome_note', models.TextField(blank=True, max_length=2000)),
                ('outcome_recorded_at', models.DateTimeField(blank=True, null=True)),
                ('order', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='campaign_checkpoints', to='reservations.order')),
            ],
            options={
                'ordering': ('order', 'position'),
                'indexes': [models.Index(condition=models.Q(('reminder_sent_at__isnull', True)), fields=['due_on'], name='checkpoint_reminder_due')],
                'constraints': [models.UniqueConstraint(fields=('order', 'position'), name='checkpoint_position_once'), models.CheckConstraint(condition=models.Q(models.Q(('outcome', ''), ('outcome_recorded_at__isnull', True)), models.Q(models.Q(('outcome', ''), _negated=True), ('outcome_recorded_at__isnull', False)), _connector='OR'), name='checkpoint_outcome_with_its_time')],
            },
        ),
        migrations.CreateModel(
            name='EarlyEndRequest',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('requested_at', models.DateTimeField()),
                ('reason', models.TextField(max_length=2000)),
                ('handled_at', models.DateTimeField(blank=True, null=True)),
                ('handled_by', models.CharField(blank=True, max_length=120)),
                ('handling_note', models.TextField(blank=True, max_length=2000)),
                ('order', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='early_end_requests', to='reservations.order')),
            ],
            options={
                'ordering': ('requested_at', 'id'),
                'constraints': [models.UniqueConstraint(condition=models.Q(('handled_at__isnull', True)), fields=('order',), name='one_open_early_end_request')],
            },
        ),
    ]
