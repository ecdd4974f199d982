"""A control plane served by real processes (gunicorn + uvicorn workers, a second host),
for tests/test_fleet_processes.py: its settings, URLs, ASGI app and the process harness."""
