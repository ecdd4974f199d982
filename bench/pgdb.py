"""A throwaway PostgreSQL database per benchmark, shared by the archive and API benches."""

from __future__ import annotations

import os

import psycopg

SERVER = "postgresql://postgres@127.0.0.1:5432"


def create_database(server: str, name: str) -> str:
    """(Re)create ``name`` via the maintenance DB; point Django at it; return its URL."""
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{server}/{name}"
    # tests.settings reads DATABASE_URL when Django imports it, so set it first.
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    return url


def drop_database(server: str, name: str) -> None:
    from django.db import connections

    connections.close_all()
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
