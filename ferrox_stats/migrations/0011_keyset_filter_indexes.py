"""Every history filter gets an index that ends in the keyset order (issue 13).

A filter's index was (column, finished_at): a page of a rare value deep in the archive
had to fetch and sort every older matching row to order them by id as well. Now each
is (column, finished_at, id), which with the row comparison of
``queries.KeysetBeyond`` reads exactly one page at any depth. finish_reason and the
API's aborted filter get one too. A filter's common value (status 200, outcome ok,
finish_reason stop, no abort) is left out of its index: the (finished_at, id) index
finds those rows densely, and every archived row then costs fewer index writes.

The new indexes are built before the old ones go, so reads keep an index throughout.
Each CREATE INDEX blocks writes to the archive while it builds (the archiver's batch
waits; requests queue up); for a large archive, build them CONCURRENTLY first (README, "Upgrading a
large archive").
"""

from django.db import migrations, models
from django.db.models import Q


class Migration(migrations.Migration):
    dependencies = [
        ("ferrox_stats", "0010_instance_state_text_latency_counts_packed"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="finishedrequest",
            index=models.Index(
                fields=["model", "finished_at", "id"], name="ferrox_fr_model_keyset"
            ),
        ),
        migrations.AddIndex(
            model_name="finishedrequest",
            index=models.Index(
                fields=["route", "finished_at", "id"], name="ferrox_fr_route_keyset"
            ),
        ),
        migrations.AddIndex(
            model_name="finishedrequest",
            index=models.Index(
                fields=["client", "finished_at", "id"], name="ferrox_fr_client_keyset"
            ),
        ),
        migrations.AddIndex(
            model_name="finishedrequest",
            index=models.Index(
                fields=["replica", "finished_at", "id"], name="ferrox_fr_replica_keyset"
            ),
        ),
        migrations.AddIndex(
            model_name="finishedrequest",
            index=models.Index(
                condition=Q(("status", 200), _negated=True),
                fields=["status", "finished_at", "id"],
                name="ferrox_fr_status_keyset",
            ),
        ),
        migrations.AddIndex(
            model_name="finishedrequest",
            index=models.Index(
                condition=Q(("outcome__in", ["error", "aborted"])),
                fields=["outcome", "finished_at", "id"],
                name="ferrox_fr_outcome_keyset",
            ),
        ),
        migrations.AddIndex(
            model_name="finishedrequest",
            index=models.Index(
                condition=Q(("finish_reason", "stop"), _negated=True),
                fields=["finish_reason", "finished_at", "id"],
                name="ferrox_fr_finish_keyset",
            ),
        ),
        migrations.AddIndex(
            model_name="finishedrequest",
            index=models.Index(
                condition=Q(("aborted__isnull", False)),
                fields=["aborted", "finished_at", "id"],
                name="ferrox_fr_aborted_keyset",
            ),
        ),
        migrations.RemoveIndex(
            model_name="finishedrequest",
            name="ferrox_fr_model_finished",
        ),
        migrations.RemoveIndex(
            model_name="finishedrequest",
            name="ferrox_fr_route_finished",
        ),
        migrations.RemoveIndex(
            model_name="finishedrequest",
            name="ferrox_fr_status_finished",
        ),
        migrations.RemoveIndex(
            model_name="finishedrequest",
            name="ferrox_fr_outcome_finished",
        ),
        migrations.RemoveIndex(
            model_name="finishedrequest",
            name="ferrox_fr_client_finished",
        ),
        migrations.RemoveIndex(
            model_name="finishedrequest",
            name="ferrox_fr_replica_finished",
        ),
    ]
