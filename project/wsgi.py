"""WSGI entry point of the demo control plane."""

import os
import signal
import threading

from django.core.wsgi import get_wsgi_application

from ferrox_stats.wsgi import wrap

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
application = wrap(get_wsgi_application())  # invalid FERROX_STATS: no start

# runserver dies on SIGTERM without running atexit, so the archive's write-behind queue
# would not drain; exit through the interpreter instead. Only where nobody handles
# SIGTERM yet (gunicorn and uwsgi install their own) and from the main thread, where
# runserver imports this.
if (
    threading.current_thread() is threading.main_thread()
    and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
):

    def _exit_on_sigterm(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
