"""What a request or a bucket of them cost: ``PriceBook``.

Prices are per model and per 1M tokens: ``input`` (prompt tokens not served from a
cache), ``output`` (completion tokens) and optionally ``cached`` (prompt tokens served
from a cache; without it they are priced as input). A self-hosted engine may also cost
by the hour: a replica's ``per_hour``. Each price takes effect at ``from_ms`` and holds
until the next one of its model or replica, so a price change never rewrites what was
priced before it. Effective moments are whole UTC hours, so that every hour bucket of
the rollups has exactly one price.

Rule 1 holds: a model with no price in force, a model that is unknown, or a request
without its token counts costs ``None``, never 0. A price of 0 is a measurement (an
engine that costs nothing), and prices as such.

``parse`` reads the settings' form (``FERROX_STATS["PRICES"]`` and
``["REPLICA_HOURLY_COST"]``) and raises ``ValueError`` naming what is wrong, so the
system checks refuse a bad table at startup.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

__all__ = [
    "HOUR_MS",
    "PER_TOKENS",
    "HourlyCost",
    "ModelPrice",
    "PriceBook",
    "parse",
    "parse_moment_ms",
]

HOUR_MS = 3_600_000
DAY_MS = 86_400_000
PER_TOKENS = 1_000_000
# A price above this per 1M tokens or per hour is taken for a typo (no real one is).
MAX_PRICE = 1e9
_MODEL_KEYS = {"from", "input", "output", "cached"}
_REPLICA_KEYS = {"from", "per_hour"}


@dataclass(frozen=True)
class ModelPrice:
    """One model's prices per 1M tokens from ``from_ms`` on (``cached`` may be None)."""

    from_ms: int
    input: float
    output: float
    cached: float | None = None

    def cost(self, prompt: int, completion: int, cached: int) -> float:
        """The cost of these token counts (``cached`` of the ``prompt`` ones)."""
        cached = min(max(cached, 0), prompt)
        cached_rate = self.input if self.cached is None else self.cached
        return (
            (prompt - cached) * self.input + cached * cached_rate + completion * self.output
        ) / PER_TOKENS


@dataclass(frozen=True)
class HourlyCost:
    """One replica's cost per hour from ``from_ms`` on."""

    from_ms: int
    per_hour: float


T = TypeVar("T", ModelPrice, HourlyCost)


class _Schedule(Generic[T]):
    """Prices of one model or replica, in force one after the other."""

    def __init__(self, prices: list[T]) -> None:
        self.prices: list[T] = sorted(prices, key=lambda price: price.from_ms)
        self.starts: list[int] = [price.from_ms for price in self.prices]

    def at(self, at_ms: int) -> T | None:
        index = bisect.bisect_right(self.starts, at_ms) - 1
        return self.prices[index] if index >= 0 else None


class PriceBook:
    """Every price in force, by model and by replica; empty prices nothing."""

    def __init__(
        self,
        models: Mapping[str, list[ModelPrice]] | None = None,
        replicas: Mapping[str, list[HourlyCost]] | None = None,
    ) -> None:
        self._models = {name: _Schedule(prices) for name, prices in (models or {}).items()}
        self._replicas = {name: _Schedule(costs) for name, costs in (replicas or {}).items()}

    @property
    def prices_tokens(self) -> bool:
        return bool(self._models)

    @property
    def prices_replicas(self) -> bool:
        return bool(self._replicas)

    def model_periods(self) -> list[tuple[str, int, int | None, ModelPrice]]:
        """Every model price with the span it is in force: ``(model, from_ms, until_ms,
        price)``, ``until_ms`` the next price's start (None: still in force)."""
        periods = []
        for model, schedule in self._models.items():
            ends: list[int | None] = [*schedule.starts[1:], None]
            for price, until_ms in zip(schedule.prices, ends, strict=True):
                periods.append((model, price.from_ms, until_ms, price))
        return periods

    def days_changing(self, from_ms: int, until_ms: int) -> list[int]:
        """The UTC days (their midnights, epoch ms, ascending) in which a model's price
        takes effect within ``[from_ms, until_ms)`` at another moment than midnight:
        those days' tokens are not all of one price."""
        return sorted(
            {
                start - start % DAY_MS
                for _, start, _, _ in self.model_periods()
                if from_ms <= start < until_ms and start % DAY_MS
            }
        )

    def price(self, model: str | None, at_ms: int) -> ModelPrice | None:
        """The price of ``model``'s tokens in force at ``at_ms``, or None."""
        schedule = self._models.get(model) if model is not None else None
        return schedule.at(at_ms) if schedule is not None else None

    def token_cost(
        self,
        model: str | None,
        at_ms: int,
        prompt: int | None,
        completion: int | None,
        cached: int | None,
    ) -> float | None:
        """What these tokens of ``model`` cost at ``at_ms``; None without a price or
        without the prompt and completion counts (an unknown cached count is 0)."""
        price = self.price(model, at_ms)
        if price is None or prompt is None or completion is None:
            return None
        return price.cost(prompt, completion, cached or 0)

    def hourly(self, replica: str | None, at_ms: int) -> float | None:
        """``replica``'s cost per hour in force at ``at_ms``, or None."""
        schedule = self._replicas.get(replica) if replica is not None else None
        cost = schedule.at(at_ms) if schedule is not None else None
        return cost.per_hour if cost is not None else None


def parse_moment_ms(value: Any, where: str) -> int:
    """An effective moment: an ISO 8601 date or datetime (naive is UTC) on a whole
    UTC hour, as epoch ms."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: 'from' must be an ISO 8601 date or datetime string")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{where}: 'from' {value!r} is not an ISO 8601 date or datetime") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    at_ms = round(moment.timestamp() * 1000)
    if at_ms % HOUR_MS:
        raise ValueError(
            f"{where}: 'from' {value!r} must be a whole UTC hour, so that each hour "
            "bucket has one price"
        )
    return at_ms


def _amount(entry: Mapping[str, Any], key: str, where: str) -> float:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: {key!r} must be a number, got {value!r}")
    if not (math.isfinite(value) and 0 <= value <= MAX_PRICE):
        raise ValueError(f"{where}: {key!r} must be from 0 to {MAX_PRICE:g}, got {value!r}")
    return float(value)


def _entries(table: Any, setting: str) -> list[tuple[str, list[Mapping[str, Any]]]]:
    if not isinstance(table, Mapping):
        raise ValueError(f"{setting} must be a dict of name -> list of prices")
    result = []
    for name, entries in table.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"{setting}: every name must be a non-empty string, got {name!r}")
        if not isinstance(entries, list | tuple) or not entries:
            raise ValueError(f"{setting}[{name!r}] must be a non-empty list of prices")
        for entry in entries:
            if not isinstance(entry, Mapping):
                raise ValueError(f"{setting}[{name!r}]: each price must be a dict")
        result.append((name, list(entries)))
    return result


def _check_keys(entry: Mapping[str, Any], required: set[str], known: set[str], where: str) -> None:
    missing, unknown = required - entry.keys(), entry.keys() - known
    if missing:
        raise ValueError(f"{where}: missing {', '.join(sorted(missing))}")
    if unknown:
        raise ValueError(
            f"{where}: unknown key {', '.join(map(repr, sorted(map(str, unknown))))}; "
            f"known: {', '.join(sorted(known))}"
        )


def _no_repeats(starts: list[int], where: str) -> None:
    if len(set(starts)) != len(starts):
        raise ValueError(f"{where}: two prices take effect at the same moment")


def parse(prices: Any, replica_costs: Any) -> PriceBook:
    """The ``PriceBook`` of the two settings; ``ValueError`` naming what is wrong."""
    models: dict[str, list[ModelPrice]] = {}
    for name, entries in _entries({} if prices is None else prices, "PRICES"):
        parsed = []
        for n, entry in enumerate(entries):
            where = f"PRICES[{name!r}][{n}]"
            _check_keys(entry, {"from", "input", "output"}, _MODEL_KEYS, where)
            cached = entry.get("cached")
            parsed.append(
                ModelPrice(
                    parse_moment_ms(entry["from"], where),
                    _amount(entry, "input", where),
                    _amount(entry, "output", where),
                    None if cached is None else _amount(entry, "cached", where),
                )
            )
        _no_repeats([price.from_ms for price in parsed], f"PRICES[{name!r}]")
        models[name] = parsed
    replicas: dict[str, list[HourlyCost]] = {}
    for name, entries in _entries(
        {} if replica_costs is None else replica_costs, "REPLICA_HOURLY_COST"
    ):
        costs = []
        for n, entry in enumerate(entries):
            where = f"REPLICA_HOURLY_COST[{name!r}][{n}]"
            _check_keys(entry, _REPLICA_KEYS, _REPLICA_KEYS, where)
            costs.append(
                HourlyCost(parse_moment_ms(entry["from"], where), _amount(entry, "per_hour", where))
            )
        _no_repeats([cost.from_ms for cost in costs], f"REPLICA_HOURLY_COST[{name!r}]")
        replicas[name] = costs
    return PriceBook(models, replicas)
