# Usage rollups (issue 14): per minute and hour bucket and per (model, route, replica,
# via_api_key, outcome), the sums and latency distributions of the archived requests,
# maintained in the archive batch's own transaction (archive/rollups.py) and rebuilt by
# manage.py ferrox_stats_rollup. A plain table (no sequence, trigger or vendor SQL), the
# same on SQLite and PostgreSQL; TelemetryRouter sends it to ARCHIVE_DATABASE like the
# archive (0009). It starts empty: rollups of rows archived before it are made with
# `manage.py ferrox_stats_rollup --since ... --until ...`.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0011_keyset_filter_indexes'),
    ]

    operations = [
        migrations.CreateModel(
            name='Rollup',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('span_s', models.PositiveIntegerField(choices=[(60, 'minute'), (3600, 'hour')])),
                ('bucket', models.DateTimeField()),
                ('group_key', models.CharField(max_length=32)),
                ('model', models.CharField(blank=True, max_length=200, null=True)),
                ('route', models.CharField(blank=True, max_length=200, null=True)),
                ('replica', models.CharField(max_length=200)),
                ('via_api_key', models.CharField(blank=True, max_length=100, null=True, verbose_name='via API key')),
                ('outcome', models.CharField(choices=[('ok', 'ok'), ('error', 'error'), ('aborted', 'aborted')], max_length=16)),
                ('requests', models.BigIntegerField(default=0)),
                ('prompt_tokens', models.BigIntegerField(default=0)),
                ('completion_tokens', models.BigIntegerField(default=0)),
                ('cached_tokens', models.BigIntegerField(default=0)),
                ('out_of_range', models.BigIntegerField(default=0)),
                ('aborts', models.TextField(blank=True, default='')),
                ('duration', models.TextField(blank=True, default='')),
                ('ttft', models.TextField(blank=True, default='')),
                ('tpot', models.TextField(blank=True, default='')),
            ],
            options={
                'verbose_name': 'rollup',
                'verbose_name_plural': 'rollups',
                'ordering': ('span_s', 'bucket', 'group_key'),
                'constraints': [models.UniqueConstraint(fields=('span_s', 'bucket', 'group_key'), name='ferrox_stats_rollup_cell_uniq')],
            },
        ),
    ]
