"""What a run did: the counts a load generator keeps and the summary line it prints."""

from __future__ import annotations

from dataclasses import dataclass, field

from .plan import OUTCOMES


@dataclass
class Report:
    """What a run did: requests by outcome and by feeder, and what the endpoints answered."""

    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    in_process: int = 0
    ingest: int = 0
    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0
    unsent: int = 0
    batches: int = 0
    failed_posts: int = 0
    # Calls sent through an OpenAI-compatible pass-through; None: the run sent none there.
    pass_through: int | None = None
    streamed: int = 0
    tokens: int = 0  # completion tokens the pass-through's answers carried
    unreachable: int = 0  # calls that found nobody listening
    fatal: str | None = None

    @property
    def total(self) -> int:
        return self.in_process + self.ingest + (self.pass_through or 0)

    def line(self) -> str:
        outcomes = ", ".join(f"{name} {self.outcomes[name]}" for name in OUTCOMES)
        line = (
            f"{self.total} requests: {outcomes}; in-process {self.in_process}, "
            f"ingest {self.ingest} (accepted {self.accepted}, duplicate {self.duplicate}, "
            f"rejected {self.rejected}, unsent {self.unsent})"
        )
        if self.pass_through is None:
            return line
        return (
            f"{line}, pass-through {self.pass_through} (streamed {self.streamed}, "
            f"tokens {self.tokens}, unreachable {self.unreachable})"
        )
