# Covering indexes for the usage answers (issue 14): every ``archive.usage`` read of the
# counters, and of the abort reasons, ranges over (span_s, bucket) and needs only the
# columns these INCLUDE, so PostgreSQL answers it by an index-only scan and never reads
# the wide heap rows (their latency distributions are most of a row). SQLite has no
# INCLUDE: there they are plain indexes (``indexes.CoveringIndex``, which keeps Django's
# W040 warning about that from a SQLite host's checks). Measured in docs/benchmarks.md, "Usage API".

from django.db import migrations, models

import ferrox_stats.indexes


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0013_partition_the_archive_by_day'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='rollup',
            index=ferrox_stats.indexes.CoveringIndex(fields=['span_s', 'bucket'], covering=('model', 'route', 'replica', 'via_api_key', 'outcome', 'requests', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'out_of_range'), name='ferrox_rollup_counters'),
        ),
        migrations.AddIndex(
            model_name='rollup',
            index=ferrox_stats.indexes.CoveringIndex(condition=models.Q(('outcome', 'aborted'), models.Q(('aborts', ''), _negated=True)), fields=['span_s', 'bucket'], covering=('model', 'route', 'replica', 'via_api_key', 'outcome', 'aborts'), name='ferrox_rollup_aborts'),
        ),
    ]
