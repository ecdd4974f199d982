#!/usr/bin/env bash
# Create the test environments, install, and run every test:
#   Django 5.2 LTS on the default python3 (3.11): SQLite, then PostgreSQL;
#   Django 6.x on python3.12, where it exists: SQLite, then PostgreSQL.
# It installs what the tests need: the virtualenvs, Debian's chromium for the
# dashboard's browser tests and Debian's prometheus for promtool (as root, when missing).
# PostgreSQL comes from DATABASE_URL, else the local server when it answers.
# Under CI=true the PostgreSQL legs are mandatory and fail loudly if it cannot connect.
# Extra arguments go to pytest (e.g. `make test ARGS="-k ring"`).
set -euo pipefail
cd "$(dirname "$0")/.."

PG_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1

setup_venv() {  # setup_venv DIR PYTHON DJANGO_SPEC EXTRAS
    local dir=$1 python=$2 django=$3 extras=$4
    if [ ! -x "$dir/bin/python" ]; then
        echo "== creating $dir with $python"
        "$python" -m venv "$dir"
    fi
    "$dir/bin/python" -m pip install -q --upgrade pip
    "$dir/bin/python" -m pip install -q -e ".[$extras]" "$django"
}

lint() {  # lint VENV: the house style, checked before any test runs
    echo "== lint: ruff and mypy (strict)"
    "$1/bin/ruff" check ferrox_stats loadgen tests project bench
    "$1/bin/ruff" format --check ferrox_stats loadgen tests project bench
    "$1/bin/mypy" ferrox_stats loadgen
}

postgres_answers() {  # postgres_answers PYTHON
    "$1" - "$PG_URL" <<'PY'
import sys
import psycopg
try:
    psycopg.connect(sys.argv[1].replace("postgres://", "postgresql://", 1), connect_timeout=5).close()
except Exception as exc:
    print(f"PostgreSQL at {sys.argv[1]} does not answer: {exc}", file=sys.stderr)
    sys.exit(1)
PY
}

run_legs() {  # run_legs VENV LABEL [pytest args...]
    local venv=$1 label=$2
    shift 2
    echo "== $label, SQLite"
    DATABASE_URL="sqlite:///:memory:" "$venv/bin/python" -m pytest "$@"
    if postgres_answers "$venv/bin/python"; then
        echo "== $label, PostgreSQL ($PG_URL)"
        DATABASE_URL="$PG_URL" "$venv/bin/python" -m pytest "$@"
    elif [ "${CI:-}" = "true" ]; then
        echo "FAIL: CI=true needs the PostgreSQL leg, and PostgreSQL does not answer." >&2
        exit 1
    else
        echo "== $label, PostgreSQL: SKIPPED (no server answers; set DATABASE_URL)" >&2
    fi
}

# The dashboard's browser tests drive Debian's Chromium (never a downloaded browser).
if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing Debian's chromium for the browser tests"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "== no /usr/bin/chromium: the browser tests will skip (CI=true makes them fail)" >&2
    fi
fi

# /metrics is checked by Prometheus's own promtool (Debian's prometheus package).
if ! command -v promtool >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing Debian's prometheus for promtool (checks /metrics)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            prometheus >/dev/null
    else
        echo "== no promtool: the /metrics format test will skip (CI=true makes it fail)" >&2
    fi
fi

setup_venv .venv "${PYTHON:-python3}" "django>=5.2,<6" "test,lint"
lint .venv
run_legs .venv "Django 5.2 on $(.venv/bin/python -V)" "$@"

find_python312() {  # the first Python 3.12 that actually runs (pyenv shims may not)
    local candidate
    for candidate in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12 \
                     /usr/bin/python3.12 /usr/local/bin/python3.12; do
        if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if PYTHON312=$(find_python312); then
    setup_venv .venv-django6 "$PYTHON312" "django>=6,<7" "test"
    run_legs .venv-django6 "Django 6 on $(.venv-django6/bin/python -V)" "$@"
else
    echo "== Django 6 leg: SKIPPED (no Python 3.12 found)" >&2
fi
