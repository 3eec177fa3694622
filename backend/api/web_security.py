"""Browser-facing hardening on every response: security headers, HSTS over HTTPS, and which
requests count as HTTPS (TLS here, or a trusted proxy's word; SECURITY.md)."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.settings import Settings

# Scripts and styles only from this origin; no inline script runs (boot data is inert JSON).
# A response that sets its own policy (downloads: `sandbox`) keeps it.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


def is_https(scope: Scope, settings: Settings) -> bool:
    """Whether this request reached the service over HTTPS, as far as the settings let us know."""
    return settings.https_only or scope.get("scheme") == "https"


def request_is_https(request: Request, settings: Settings) -> bool:
    return is_https(request.scope, settings)


class SecurityHeaders:
    """Adds `SECURITY_HEADERS` (where the response has not set them) and, over HTTPS,
    `Strict-Transport-Security` to every HTTP response, errors and static files included."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.hsts = f"max-age={settings.hsts_seconds}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        https = is_https(scope, self.settings) and self.settings.hsts_seconds > 0

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                if https:
                    headers["Strict-Transport-Security"] = self.hsts
            await send(message)

        await self.app(scope, receive, with_headers)
