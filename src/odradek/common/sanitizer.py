"""Kafka's Sanitizer: user names as znode names (``/config/users/<name>``)."""

from __future__ import annotations

from urllib.parse import quote, unquote


def sanitize_user(name: str) -> str:
    """Kafka's Sanitizer.sanitize: URL-encoded as Java's URLEncoder (with '*' as %2A and ' ' as
    %20)."""
    return quote(name, safe="._-").replace("~", "%7E")


def desanitize_user(name: str) -> str:
    return unquote(name)
