"""List prices of models and the arithmetic of cost and budgets; plain data, no I/O.

Prices are USD per million tokens, as `price = {input, output, cache_read, cache_write}` on a
`[[models.routes]]` entry of corral.toml, or one of `DEFAULT_PRICES` for known Claude models.
Costs are kept as whole **nano-dollars** (1e-9 USD) so that sums never round; the wire shows
them as the SDK's `BetaMonetaryAmount`: `{amount, currency}`, amount in minor units (cents) as
an integer decimal string.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

CURRENCY = "USD"
NANOS_PER_CENT = 10_000_000
_NANOS_PER_USD_PER_MTOK = 1000
"""A price of 1 USD per million tokens is 1000 nano-dollars per token."""
_PRICE_KEYS = ("input", "output", "cache_read", "cache_write")
_AMOUNT = re.compile(r"(0|[1-9][0-9]{0,15})\Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """USD per million tokens of each kind."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    def __post_init__(self) -> None:
        for key in _PRICE_KEYS:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"price.{key} must be a non-negative number (USD per MTok)")

    def per_token(self, kind: str) -> int:
        """Nano-dollars per token of `kind` (exact for prices with up to 3 decimals)."""
        return round(Decimal(str(getattr(self, kind))) * _NANOS_PER_USD_PER_MTOK)


DEFAULT_PRICES: tuple[tuple[str, Price], ...] = (
    # Public list prices (USD/MTok; cache_write is the 5-minute TTL). More specific first.
    ("claude-opus-4-5*", Price(input=5, output=25, cache_read=0.5, cache_write=6.25)),
    ("claude-opus-4-1*", Price(input=15, output=75, cache_read=1.5, cache_write=18.75)),
    ("claude-opus-4-0*", Price(input=15, output=75, cache_read=1.5, cache_write=18.75)),
    ("claude-opus-4-2025*", Price(input=15, output=75, cache_read=1.5, cache_write=18.75)),
    ("claude-sonnet-4-5*", Price(input=3, output=15, cache_read=0.3, cache_write=3.75)),
    ("claude-sonnet-4-0*", Price(input=3, output=15, cache_read=0.3, cache_write=3.75)),
    ("claude-sonnet-4-2025*", Price(input=3, output=15, cache_read=0.3, cache_write=3.75)),
    ("claude-3-7-sonnet*", Price(input=3, output=15, cache_read=0.3, cache_write=3.75)),
    ("claude-haiku-4-5*", Price(input=1, output=5, cache_read=0.1, cache_write=1.25)),
    ("claude-3-5-haiku*", Price(input=0.8, output=4, cache_read=0.08, cache_write=1)),
    ("claude-3-haiku*", Price(input=0.25, output=1.25, cache_read=0.03, cache_write=0.3)),
)
"""Models without an entry here need a `price` on their route to be priced (or budgeted)."""


def default_price(model: str) -> Price | None:
    """The built-in list price of a known Claude model, else None."""
    for pattern, price in DEFAULT_PRICES:
        if fnmatch.fnmatchcase(model, pattern):
            return price
    return None


def parse_price(where: str, value: Any) -> Price:
    """A `price = {input, output, cache_read, cache_write}` table; ValueError naming `where`."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: 'price' must be a table {{input, output, ...}}")
    unknown = sorted(set(value) - set(_PRICE_KEYS))
    missing = [key for key in ("input", "output") if key not in value]
    if unknown or missing:
        raise ValueError(
            f"{where}: 'price' needs input and output (cache_read and cache_write are optional), "
            f"got unknown {unknown} / missing {missing}"
        )
    try:
        return Price(
            input=value["input"],
            output=value["output"],
            cache_read=value.get("cache_read", value["input"]),
            cache_write=value.get("cache_write", value["input"]),
        )
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def cost_nanos(price: Price, usage: Mapping[str, int]) -> int:
    """What one request's `model_usage` costs at `price`, in nano-dollars."""
    return (
        int(usage.get("input_tokens", 0)) * price.per_token("input")
        + int(usage.get("output_tokens", 0)) * price.per_token("output")
        + int(usage.get("cache_read_input_tokens", 0)) * price.per_token("cache_read")
        + int(usage.get("cache_creation_input_tokens", 0)) * price.per_token("cache_write")
    )


def next_request_floor(price: Price, usage: Mapping[str, int]) -> int:
    """The least the request after this one can cost: it re-sends everything this one read
    and wrote, each token at no less than the cheapest input rate (a cache read, usually)."""
    resent = sum(
        int(usage.get(key, 0))
        for key in (
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        )
    )
    return resent * min(price.per_token("input"), price.per_token("cache_read"))


def money(nanos: int) -> dict[str, str]:
    """Nano-dollars as the SDK's `{amount, currency}`: whole cents, rounded half up."""
    return {"amount": str((nanos + NANOS_PER_CENT // 2) // NANOS_PER_CENT), "currency": CURRENCY}


def parse_money(where: str, value: Any) -> int:
    """`{amount, currency}` (minor units as an integer string) in nano-dollars.

    Raises:
        ValueError: the message names `where` and what is wrong.
    """
    if not isinstance(value, Mapping) or set(value) != {"amount", "currency"}:
        raise ValueError(f"{where}: must be {{amount, currency}}")
    amount, currency = value["amount"], value["currency"]
    if currency != CURRENCY:
        raise ValueError(f"{where}.currency: only {CURRENCY!r} is supported")
    if not isinstance(amount, str) or not _AMOUNT.match(amount):
        raise ValueError(
            f"{where}.amount: must be a whole number of cents as a string without leading "
            'zeros, e.g. "2500" for $25.00'
        )
    return int(amount) * NANOS_PER_CENT


def parse_budget(value: Any) -> tuple[dict[str, Any], int]:
    """A session `budget` as stored (SDK shape) and its ceiling in nano-dollars.

    Raises:
        ValueError: not `{type: "limit", max_list_cost: {amount, currency}}`.
    """
    if not isinstance(value, Mapping) or set(value) != {"type", "max_list_cost"}:
        raise ValueError('budget: must be {"type": "limit", "max_list_cost": {amount, currency}}')
    if value["type"] != "limit":
        raise ValueError("budget.type: must be 'limit'")
    nanos = parse_money("budget.max_list_cost", value["max_list_cost"])
    budget = {"type": "limit", "max_list_cost": dict(value["max_list_cost"])}
    return budget, nanos
