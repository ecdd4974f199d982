"""``manage.py ferrox_stats_loadgen``: play plausible inference traffic through the real feeders."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ferrox_stats.models import ApiToken
from ferrox_stats.tokens import issue, revoke
from loadgen import IngestClient, LoadGenerator, Report, check_local_url
from loadgen.openai_client import OpenAIClient, PassThroughRefused

DEFAULT_DURATION_S = 60.0


@contextmanager
def stopping_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Ctrl-C or SIGTERM ends the run cleanly (flush, revoke, summary) instead of killing it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        stop()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class Command(BaseCommand):
    help = (
        "Play plausible LLM-serving traffic (several models, streaming, aborts, engine errors, "
        "pool reports) through this process's in-process tracker, an ingest endpoint and/or "
        "OpenAI calls to a pass-through on this machine, until a request count or a "
        "duration; then print a summary."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--duration",
            type=float,
            metavar="SECONDS",
            help=f"Stop after this many seconds (default {DEFAULT_DURATION_S:.0f} "
            "unless --requests is given).",
        )
        parser.add_argument("--requests", type=int, metavar="N", help="Stop after N requests.")
        parser.add_argument("--concurrency", type=int, default=4, help="Requests at a time (4).")
        parser.add_argument(
            "--seed", type=int, help="Seed the traffic; a seed replays the same request ids."
        )
        parser.add_argument(
            "--speed", type=float, default=1.0, help="Serve this many times faster than real (1)."
        )
        parser.add_argument(
            "--ingest-url", metavar="URL", help="The ingest endpoint, on 127.0.0.1 or localhost."
        )
        credential = parser.add_mutually_exclusive_group()
        credential.add_argument(
            "--ingest-token", metavar="SECRET", help="An ingest token's secret."
        )
        credential.add_argument(
            "--ingest-replica",
            metavar="NAME",
            help="Issue an ingest token for replica NAME for this run (revoked at the end).",
        )
        parser.add_argument(
            "--ingest-share",
            type=float,
            metavar="FRACTION",
            help="Fraction of requests reported over ingest rather than tracked in this "
            "process (0.5 with --ingest-url, else 0).",
        )
        parser.add_argument(
            "--openai-url",
            metavar="URL",
            help="An OpenAI base URL (ending /v1) on 127.0.0.1 or localhost: the pass-through, "
            "in front of the simulated engine (python -m loadgen.engine).",
        )
        parser.add_argument(
            "--openai-token",
            metavar="SECRET",
            help="An API token with the infer scope (default: one issued for this run, "
            "revoked at the end).",
        )
        parser.add_argument(
            "--openai-share",
            type=float,
            metavar="FRACTION",
            help="Fraction of requests sent as OpenAI calls to --openai-url (0.5 with it, "
            "else 0); they take what the engine takes, whatever --speed.",
        )
        parser.add_argument("--quiet", action="store_true", help="Print only the summary.")

    def handle(self, *args: Any, **options: Any) -> None:
        requests, duration = options["requests"], options["duration"]
        if requests is not None and requests < 1:
            raise CommandError("--requests must be at least 1.")
        if duration is not None and not duration > 0:
            raise CommandError("--duration must be more than 0 seconds.")
        if requests is None and duration is None:
            duration = DEFAULT_DURATION_S
        if not 1 <= options["concurrency"] <= 256:
            raise CommandError("--concurrency must be from 1 to 256.")
        if not options["speed"] > 0:
            raise CommandError("--speed must be more than 0.")
        url = options["ingest_url"]
        token, replica = options["ingest_token"], options["ingest_replica"]
        share = _share("ingest", url, options["ingest_share"], token is not None or replica)
        if url is not None and token is None and replica is None:
            raise CommandError("--ingest-url needs --ingest-token or --ingest-replica.")
        openai_url, openai_token = options["openai_url"], options["openai_token"]
        openai_share = _share("openai", openai_url, options["openai_share"], openai_token)
        if share + openai_share > 1:
            raise CommandError("--ingest-share and --openai-share add up to more than 1.")

        issued: list[ApiToken] = []
        openai: OpenAIClient | None = None
        try:
            if url is not None and token is None:
                label = f"loadgen-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{replica}"[:100]
                made, token = issue(label, read=False, ingest=True, replica=replica)
                issued.append(made)
                if not options["quiet"]:
                    self.stdout.write(f"Issued ingest token {label!r} for replica {replica!r}.")
            if openai_url is not None:
                if openai_token is None:
                    # Its label is what the pass-through records as via_api_key.
                    label = f"loadgen-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-openai"
                    made, openai_token = issue(label, read=False, infer=True)
                    issued.append(made)
                    if not options["quiet"]:
                        self.stdout.write(f"Issued infer token {label!r} for the pass-through.")
                openai = OpenAIClient(openai_url, openai_token)
                try:
                    openai.discover()
                except (PassThroughRefused, httpx.HTTPError) as exc:
                    raise CommandError(f"--openai-url: {exc}.") from None
            generator = LoadGenerator(
                requests=requests,
                duration_s=duration,
                concurrency=options["concurrency"],
                seed=options["seed"],
                speed=options["speed"],
                ingest_share=share,
                ingest=IngestClient(url, token) if url is not None else None,
                openai_share=openai_share,
                openai=openai,
            )
            if not options["quiet"]:
                bounds = [f"{requests} requests"] if requests is not None else []
                bounds += [f"{duration:g} s"] if duration is not None else []
                feeders = [f"{share:.0%} over ingest to {url}"] if share else []
                if openai_share and openai is not None:
                    feeders.append(
                        f"{openai_share:.0%} through the pass-through at {openai_url} "
                        f"({', '.join(openai.models)})"
                    )
                self.stdout.write(
                    f"Playing traffic for at most {' or '.join(bounds)}, "
                    f"{options['concurrency']} at a time, {', '.join(feeders) or 'all in-process'}."
                )
            with stopping_on_signals(generator.stop):
                report = generator.run(None if options["quiet"] else self._progress)
        finally:
            if openai is not None:
                openai.close()
            for made in issued:
                revoke(made)
        self.stdout.write(report.line())
        if report.fatal:
            raise CommandError(f"Stopped early: {report.fatal}.")

    def _progress(self, elapsed_s: float, report: Report) -> None:
        self.stdout.write(f"{elapsed_s:.0f} s: {report.line()}")


def _share(feeder: str, url: str | None, share: float | None, other_options: object) -> float:
    """The checked fraction of requests sent to ``--<feeder>-url`` (0.5 by default with one)."""
    if share is None:
        share = 0.5 if url else 0.0
    if not 0 <= share <= 1:
        raise CommandError(f"--{feeder}-share must be from 0 to 1.")
    if url is None:
        if share > 0 or other_options:
            raise CommandError(f"The {feeder} feeder needs --{feeder}-url.")
        return share
    try:
        check_local_url(url)
    except ValueError as exc:
        raise CommandError(f"--{feeder}-url: {exc}.") from None
    return share
