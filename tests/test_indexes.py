"""The rollup's covering indexes: INCLUDE where the database has it, and no warning where not."""

from __future__ import annotations

import pytest
from django.core import checks
from django.db import connection

from ferrox_stats.indexes import CoveringIndex
from ferrox_stats.models import Rollup

pytestmark = pytest.mark.django_db


def covering_indexes() -> list[CoveringIndex]:
    return [index for index in Rollup._meta.indexes if isinstance(index, CoveringIndex)]


def test_the_rollup_has_its_three_covering_indexes() -> None:
    assert {index.name for index in covering_indexes()} == {
        "ferrox_rollup_level_counters",
        "ferrox_rollup_level_aborts",
        "ferrox_rollup_percentiles_all",
    }


def test_the_model_checks_raise_no_warning_about_covering_columns() -> None:
    found = checks.run_checks(databases=[connection.alias])
    assert [message.id for message in found if message.id == "models.W040"] == []


def test_include_is_written_only_where_the_database_has_it() -> None:
    # Not entered: writing the statement needs no transaction (SQLite's editor refuses
    # to enter inside the test's).
    editor = connection.schema_editor(collect_sql=True)
    for index in covering_indexes():
        sql = str(index.create_sql(Rollup, editor))
        assert ("INCLUDE" in sql) is connection.features.supports_covering_indexes, sql
        assert '"span_s", "level", "bucket"' in sql


def test_it_deconstructs_to_itself_with_its_covered_columns() -> None:
    for index in covering_indexes():
        path, args, kwargs = index.deconstruct()
        assert path == "ferrox_stats.indexes.CoveringIndex"
        assert CoveringIndex(*args, **kwargs) == index
        assert kwargs["covering"] == index.covering and "model" in index.covering
