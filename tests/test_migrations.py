"""The models and their migrations agree."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ferrox_stats import tokens
from ferrox_stats.archive.batch import write_batch
from ferrox_stats.archive.rows import Pending
from ferrox_stats.models import FinishedRequest
from tests.factories import make_record


@pytest.mark.django_db
def test_makemigrations_finds_nothing_to_do() -> None:
    out = StringIO()
    call_command("makemigrations", "ferrox_stats", "--check", "--dry-run", stdout=out)
    assert out.getvalue() == "No changes detected in app 'ferrox_stats'\n"


@pytest.mark.django_db(transaction=True)
def test_0007_puts_rows_archived_before_it_in_the_ingest_namespace() -> None:
    before = [("ferrox_stats", "0005_api_token_infer_scope")]
    MigrationExecutor(connection).migrate(before)
    # A row as the previous release wrote it, naming no namespace column.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ferrox_stats_finishedrequest (request_id, finished_at, replica, "
            "instance, seq, outcome) VALUES ('eng-1', '2026-01-01T00:00:00Z', 'gpu-1', 'p', 3, "
            "'ok')"
        )
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert list(FinishedRequest.objects.values_list("ingested", flat=True)) == [True]
    old = make_record(request_id="eng-1", replica="gpu-1")
    # A producer's replay of it is still a duplicate; the server's own keys are apart.
    produced = Pending(3, old, "p", ingested=True)
    assert write_batch([produced]).outcomes == ["duplicate"]
    assert write_batch([produced._replace(ingested=False)]).outcomes == ["inserted"]


@pytest.mark.django_db(transaction=True)
def test_0008_keeps_tokens_issued_before_it_working_without_owner_or_expiry() -> None:
    MigrationExecutor(connection).migrate([("ferrox_stats", "0007_ingest_identity_namespace")])
    secret = tokens.SECRET_PREFIX + "issued-by-the-previous-release-0000000000000"
    # A token as the previous release wrote it, naming neither owner nor expiry.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ferrox_stats_apitoken (label, prefix, secret_hash, can_read, "
            "can_ingest, can_infer, replica, created_at) VALUES ('old', 'fxs_issu', %s, "
            "TRUE, FALSE, FALSE, '', '2026-01-01T00:00:00Z')",
            [tokens.hash_secret(secret)],
        )
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    token = tokens.check(secret)
    assert token is not None and token.label == "old"
    assert (token.owner, token.expires_at) == (None, None)
