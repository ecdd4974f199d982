#!/usr/bin/env bash
# Run the demo control plane on its embedded default, SQLite, with live traffic through
# both feeders, and stop everything it started when it ends (Ctrl-C, or after
# DEMO_DURATION seconds):
#   - the server (runserver, in the background) plays in-process traffic from its first
#     request on: the tracker records into the process that serves the dashboard;
#   - ferrox_stats_loadgen (a second process) plays an engine elsewhere, replica
#     demo-engine-1, reporting over HTTP ingest with a token it issues for this run
#     (never printed) and revokes when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

ADDR="${DEMO_ADDR:-127.0.0.1:8000}"
DURATION="${DEMO_DURATION:-3600}"
PY=.venv/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1 DJANGO_SETTINGS_MODULE=project.settings
unset DATABASE_URL  # the demo is the embedded default; see README to point it elsewhere

if [ ! -x "$PY" ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
# Install once, and again when the dependencies change: a second start takes seconds.
STAMP=.venv/.ferrox-demo-installed
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
    "$PY" -m pip install -q --upgrade pip
    "$PY" -m pip install -q -e ".[demo]" "django>=5.2,<6"
    touch "$STAMP"
fi

"$PY" manage.py migrate --noinput -v 0
"$PY" manage.py shell -c "
from django.contrib.auth import get_user_model
User = get_user_model()
user, _ = User.objects.get_or_create(username='demo', defaults={'is_staff': True, 'is_superuser': True})
user.is_staff = user.is_superuser = True
user.set_password('demo')
user.save()
" >/dev/null

SERVER_PID="" LOADGEN_PID=""
SERVER_LOG="$(mktemp "${TMPDIR:-/tmp}/ferrox-demo-server.XXXXXX.log")"
stop() {  # stop PID: SIGTERM, then wait for it to finish cleanly
    if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then
        kill -TERM "$1" 2>/dev/null || true
        wait "$1" 2>/dev/null || true
    fi
}
cleanup() {
    trap - EXIT INT TERM
    # The loadgen first: it flushes its last batch to the server and revokes its token.
    # Then the server: SIGTERM exits through the interpreter (project/wsgi.py), so the
    # archive's write-behind queue drains.
    stop "$LOADGEN_PID"
    stop "$SERVER_PID"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

FERROX_DEMO_TRAFFIC=1 FERROX_DEMO_TRAFFIC_S="$DURATION" \
    "$PY" manage.py runserver --noreload "$ADDR" >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!

# Ingest goes to this machine whatever address the server binds (the loadgen refuses others).
PORT="${ADDR##*:}"
BASE="http://127.0.0.1:$PORT"
# The first answer also starts the server's in-process traffic.
if ! "$PY" - "$BASE/" "$SERVER_PID" <<'PY'
import os, sys, time, urllib.request
url, pid = sys.argv[1], int(sys.argv[2])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(1)  # the server died; its log says why
    try:
        opener.open(url, timeout=2).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
PY
then
    echo "The demo server did not start; its log ($SERVER_LOG):" >&2
    tail -n 30 "$SERVER_LOG" >&2
    exit 1
fi

cat <<MSG

  ferrox_stats demo control plane
  open      http://$ADDR/   (log in as demo / demo)
  dashboard http://$ADDR/telemetry/dashboard/
  admin     http://$ADDR/admin/
  API docs  http://$ADDR/telemetry/v1/docs
  Live traffic: in-process in the server, and replica demo-engine-1 over ingest,
  for $DURATION s. Ctrl-C stops everything. Server log: $SERVER_LOG

MSG

# In the background, waited for: a signal to this script then stops it at once.
"$PY" manage.py ferrox_stats_loadgen \
    --duration "$DURATION" --concurrency 6 \
    --ingest-url "$BASE/telemetry/v1/ingest" --ingest-replica demo-engine-1 --ingest-share 1 &
LOADGEN_PID=$!
wait "$LOADGEN_PID"
