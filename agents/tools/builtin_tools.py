"""In-process tools registered with the decorator."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from agents.tools.registry import register_tool


@register_tool(
    name="compare_prices",
    description=(
        "When a customer wants to know which of two prices is cheaper or the difference "
        "between them: compares two amounts already returned by get_sku_price."
    ),
    params_schema={
        "type": "object",
        "properties": {
            "price_a": {"type": "number", "minimum": 0},
            "price_b": {"type": "number", "minimum": 0},
        },
        "required": ["price_a", "price_b"],
        "additionalProperties": False,
    },
)
def compare_prices(*, price_a: float, price_b: float) -> dict[str, object]:
    try:
        a, b = Decimal(str(price_a)), Decimal(str(price_b))
    except InvalidOperation as exc:  # pragma: no cover - schema rejects non-numbers first
        raise ValueError("prices must be numbers") from exc
    cheaper = "a" if a < b else "b" if b < a else "same"
    return {"cheaper": cheaper, "difference": str(abs(a - b))}


@register_tool(
    name="current_time",
    description="When the answer depends on today's date (deadlines, delivery estimates).",
    params_schema={"type": "object", "properties": {}, "additionalProperties": False},
)
def current_time() -> dict[str, str]:
    return {"utc": datetime.now(UTC).isoformat(timespec="seconds")}
