# Ingest identity namespaced by what the server knows (issue 11, item 3).
#
# Existing rows take the column's database default (True, the ingest namespace): adding
# a column with a constant default rewrites nothing, and a row already stored cannot be
# made to vanish by a later one; a producer's replay of one still answers duplicate.
# The database default also keeps writers of the previous release (which do not name
# the column) working during a rolling deploy.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0006_commit_seq_cursor'),
    ]

    operations = [
        migrations.AddField(
            model_name='finishedrequest',
            name='ingested',
            field=models.BooleanField(db_default=True, editable=False),
        ),
        migrations.AddConstraint(
            model_name='finishedrequest',
            constraint=models.UniqueConstraint(fields=('replica', 'request_id', 'ingested'), name='ferrox_stats_fr_ns_request_uniq'),
        ),
        migrations.AddConstraint(
            model_name='finishedrequest',
            constraint=models.UniqueConstraint(fields=('instance', 'seq', 'replica', 'ingested'), name='ferrox_stats_fr_ns_instance_seq_uniq'),
        ),
        migrations.RemoveConstraint(
            model_name='finishedrequest',
            name='ferrox_stats_fr_replica_request_uniq',
        ),
        migrations.RemoveConstraint(
            model_name='finishedrequest',
            name='ferrox_stats_fr_instance_seq_uniq',
        ),
    ]
