"""cardstream event contracts (JSON Schema + pydantic mirrors)."""
