# Heartbeats (issue 10): one row per recorder, upserted by its heartbeat thread every
# HEARTBEAT_S and read by GET v1/fleet. A plain table (no sequence, trigger or vendor
# SQL), so it is the same on SQLite and PostgreSQL; TelemetryRouter sends it to
# ARCHIVE_DATABASE like the archive. Old rows of stopped or lost instances are pruned
# by the publisher (INSTANCE_KEEP_S), through the index on last_seen.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0008_permissions_token_owner_expiry'),
    ]

    operations = [
        migrations.CreateModel(
            name='Instance',
            fields=[
                ('instance', models.CharField(max_length=255, primary_key=True, serialize=False)),
                ('replica', models.CharField(max_length=200)),
                ('host', models.CharField(max_length=255)),
                ('pid', models.PositiveIntegerField()),
                ('started_at', models.DateTimeField()),
                ('last_seen', models.DateTimeField()),
                ('heartbeat_s', models.FloatField()),
                ('stopped', models.BooleanField(default=False)),
                ('state', models.JSONField()),
            ],
            options={
                'verbose_name': 'instance',
                'verbose_name_plural': 'instances',
                'ordering': ('-last_seen', 'instance'),
                'indexes': [models.Index(fields=['last_seen'], name='ferrox_instance_last_seen')],
            },
        ),
    ]
