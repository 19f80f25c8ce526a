"""Credentials configured as static provider headers are redacted like API keys."""

from __future__ import annotations

from asgi_router import RouterSettings
from asgi_router.observability.redaction import secrets_of


def test_credential_like_static_provider_headers_count_as_secrets_and_plain_ones_do_not() -> None:
    settings = RouterSettings(
        providers={
            "azure": {
                "base_url": "https://example.openai.azure.com/openai",
                "headers": {"api-key": "azure-secret-0123456789", "X-Title": "my app"},
            }
        },
        allow_unauthenticated=True,
    )
    found = secrets_of(settings)
    assert "azure-secret-0123456789" in found
    assert "my app" not in found
