"""The fault-injection proxy itself (``tests.faults``), against the PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from tests.asgi_server import wait_for
from tests.faults import PASS, REFUSE, STALL, FaultProxy, fault_proxy

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL")


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    settings = connection.settings_dict
    with fault_proxy((settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))) as proxy:
        yield proxy


def connect(proxy: FaultProxy) -> Any:
    import psycopg

    return psycopg.connect(
        host="127.0.0.1",
        port=proxy.port,
        user=connection.settings_dict["USER"],
        dbname="postgres",
        connect_timeout=2,
        autocommit=True,
    )


def answers(conn: Any) -> bool:
    return bool(conn.execute("SELECT 1").fetchone() == (1,))


def test_pass_forwards(proxy: FaultProxy) -> None:
    with connect(proxy) as conn:
        assert answers(conn)


def test_refuse_closes_new_connections_and_keeps_open_ones(proxy: FaultProxy) -> None:
    import psycopg

    with connect(proxy) as conn:
        proxy.mode = REFUSE
        with pytest.raises(psycopg.OperationalError):
            connect(proxy)
        assert answers(conn)


def test_reset_breaks_open_connections(proxy: FaultProxy) -> None:
    import psycopg

    conn = connect(proxy)
    try:
        assert proxy.reset() == 2  # both ends of the one connection
        with pytest.raises(psycopg.OperationalError):
            answers(conn)
    finally:
        # Closed by hand: what libpq makes of the reset (its status flag, a command it
        # still counts as in progress) depends on which side of it a read or write
        # fell, a race under load; closing never raises.
        conn.close()
    with connect(proxy) as again:
        assert answers(again)


def test_stall_accepts_and_forwards_nothing_until_pass(proxy: FaultProxy) -> None:
    import psycopg

    proxy.mode = STALL
    with pytest.raises(psycopg.OperationalError, match="timeout"):
        connect(proxy)  # accepted, then nothing: the connect timeout ends it
    assert proxy.accepted == 1
    proxy.mode = PASS
    with connect(proxy) as conn:
        assert answers(conn)


def test_it_stops_by_itself_after_its_lifetime() -> None:
    settings = connection.settings_dict
    target = (settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))
    with fault_proxy(target, lifetime_s=0.2) as proxy:
        assert wait_for(lambda: proxy.stopped, timeout_s=5)


def test_modes_are_checked() -> None:
    proxy = FaultProxy(("127.0.0.1", 1))
    with pytest.raises(ValueError, match="mode"):
        proxy.mode = "drop"
    proxy.close()
