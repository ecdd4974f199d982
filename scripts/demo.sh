#!/usr/bin/env bash
# Run the demo control plane on its embedded default, SQLite, with live traffic from
# three feeders, and stop everything it started when it ends (Ctrl-C, or after
# DEMO_DURATION seconds):
#   - a simulated OpenAI-compatible engine (python -m loadgen.engine), on
#     the port after the server's, the upstream of the server's pass-through;
#   - the server (uvicorn, ASGI: the pass-through needs it) plays in-process traffic from
#     its first request on: the tracker records into the process that serves the dashboard;
#   - ferrox_stats_loadgen (a third process) plays, half each, an engine elsewhere
#     (replica demo-engine-1, reporting over HTTP ingest) and clients of the pass-through
#     (OpenAI calls to /v1/..., streamed or not, some failed, some left mid-stream), with
#     tokens it issues for this run (never printed) and revokes when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

ADDR="${DEMO_ADDR:-127.0.0.1:8000}"
DURATION="${DEMO_DURATION:-3600}"
PORT="${ADDR##*:}"
case "$ADDR" in
    *:*) HOST="${ADDR%:*}" ;;
    *) HOST=127.0.0.1 ;;  # a port alone, as runserver takes it
esac
HOST="${HOST#\[}"  # uvicorn takes an IPv6 address without its brackets
HOST="${HOST%\]}"
ENGINE_PORT="${DEMO_ENGINE_PORT:-$((PORT + 1))}"
MODELS="llama-3-8b-sim,qwen-2-7b-sim"
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

ENGINE_PID="" SERVER_PID="" LOADGEN_PID=""
LOGS="$(mktemp -d "${TMPDIR:-/tmp}/ferrox-demo.XXXXXX")"
# Each background process in a process group of its own: Ctrl-C then reaches this script
# alone, and cleanup stops them in order (uvicorn and the loadgen would all stop at once
# on the terminal's SIGINT). Job control off again at once: no job notices.
background() {  # background CMD...: start it, its pid in BG_PID
    set -m
    "$@" &
    BG_PID=$!
    set +m
}
stop() {  # stop PID: SIGTERM, then wait for it to finish cleanly
    if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then
        kill -TERM "$1" 2>/dev/null || true
        wait "$1" 2>/dev/null || true
    fi
}
cleanup() {
    trap - EXIT HUP INT TERM
    # The loadgen first: it flushes its last batch to the server and revokes its tokens.
    # Then the server: its ASGI shutdown (project/asgi.py) drains the archive's
    # write-behind queue. The engine last: the pass-through's requests need it to the end.
    stop "$LOADGEN_PID"
    stop "$SERVER_PID"
    stop "$ENGINE_PID"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

ready() {  # ready URL PID NAME LOG: wait until URL answers, unless PID dies first
    if ! "$PY" - "$1" "$2" <<'PY'
import os, sys, time, urllib.request
url, pid = sys.argv[1], int(sys.argv[2])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(1)  # it died; its log says why
    try:
        opener.open(url, timeout=2).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
PY
    then
        echo "The demo $3 did not start; its log ($4):" >&2
        tail -n 30 "$4" >&2
        exit 1
    fi
}

background "$PY" -m loadgen.engine --host 127.0.0.1 --port "$ENGINE_PORT" \
    --ttft-ms 150 --tokens-per-s 40 --models "$MODELS" >"$LOGS/engine.log" 2>&1
ENGINE_PID=$BG_PID
ready "http://127.0.0.1:$ENGINE_PORT/v1/models" "$ENGINE_PID" engine "$LOGS/engine.log"

# A bounded graceful shutdown: an open browser tab must not hold the server up.
background env FERROX_DEMO_ENGINE_URL="http://127.0.0.1:$ENGINE_PORT/v1" \
    FERROX_DEMO_TRAFFIC=1 FERROX_DEMO_TRAFFIC_S="$DURATION" \
    "$PY" -m uvicorn project.asgi:application --host "$HOST" --port "$PORT" \
    --log-level warning --timeout-graceful-shutdown 10 >"$LOGS/server.log" 2>&1
SERVER_PID=$BG_PID
# Ingest and the pass-through are reached on this machine whatever address the server
# binds (the loadgen refuses others). The first answer also starts the in-process traffic.
BASE="http://127.0.0.1:$PORT"
ready "$BASE/" "$SERVER_PID" server "$LOGS/server.log"

cat <<MSG

  ferrox_stats demo control plane
  open      http://$ADDR/   (log in as demo / demo)
  dashboard http://$ADDR/telemetry/dashboard/
  admin     http://$ADDR/admin/
  API docs  http://$ADDR/telemetry/v1/docs
  OpenAI    http://$ADDR/v1  (pass-through to a simulated engine serving $MODELS;
            a key: .venv/bin/python manage.py ferrox_stats_token create NAME --infer --no-read)
  Live traffic for $DURATION s: in-process in the server, replica demo-engine-1 over
  ingest, and OpenAI calls through the pass-through. Ctrl-C stops everything.
  Logs: $LOGS

MSG

# In the background, waited for: a signal to this script then stops it at once.
background "$PY" manage.py ferrox_stats_loadgen \
    --duration "$DURATION" --concurrency 8 \
    --ingest-url "$BASE/telemetry/v1/ingest" --ingest-replica demo-engine-1 --ingest-share 0.5 \
    --openai-url "$BASE/v1" --openai-share 0.5
LOADGEN_PID=$BG_PID
wait "$LOADGEN_PID"
