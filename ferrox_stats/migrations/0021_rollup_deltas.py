# Rollup deltas (issue 14): an archive batch inserts its minute cells as rows of their
# own, in its transaction, and a fold adds them to the rollups (``archive/fold.py``), so
# that a fleet's writers no longer wait on each other's rollup rows. A new, empty
# table: the rollups written before stay as they are. During a rolling deploy the
# writers of the release before still add to the rollups directly, in the same lock
# order as a fold; both counts are right.

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ferrox_stats", "0020_rollup_counted_levels"),
    ]

    operations = [
        migrations.CreateModel(
            name="RollupDelta",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "made",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("bucket", models.DateTimeField()),
                ("model", models.CharField(blank=True, max_length=200, null=True)),
                ("route", models.CharField(blank=True, max_length=200, null=True)),
                ("replica", models.CharField(max_length=200)),
                (
                    "via_api_key",
                    models.CharField(
                        blank=True, max_length=100, null=True, verbose_name="via API key"
                    ),
                ),
                (
                    "outcome",
                    models.CharField(
                        blank=True,
                        choices=[("ok", "ok"), ("error", "error"), ("aborted", "aborted")],
                        max_length=16,
                    ),
                ),
                ("requests", models.BigIntegerField(default=0)),
                ("errors", models.BigIntegerField(default=0)),
                ("aborted", models.BigIntegerField(default=0)),
                ("aborts_client_disconnect", models.BigIntegerField(default=0)),
                ("aborts_explicit", models.BigIntegerField(default=0)),
                ("aborts_timeout", models.BigIntegerField(default=0)),
                ("prompt_tokens", models.BigIntegerField(default=0)),
                ("completion_tokens", models.BigIntegerField(default=0)),
                ("cached_tokens", models.BigIntegerField(default=0)),
                ("out_of_range", models.BigIntegerField(default=0)),
                ("aborts", models.TextField(blank=True, default="")),
                ("duration", models.TextField(blank=True, default="")),
                ("ttft", models.TextField(blank=True, default="")),
                ("tpot", models.TextField(blank=True, default="")),
            ],
            options={
                "verbose_name": "rollup delta",
                "verbose_name_plural": "rollup deltas",
            },
        ),
    ]
