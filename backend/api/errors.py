"""JSON errors with a stable `code` (SPEC 6.1): every failure a client sees has this shape.

The one place where the services' domain errors (`backend.services.errors`) become HTTP
statuses; FastAPI's own errors and database faults get the same JSON shape here.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from backend.api.web_security import SECURITY_HEADERS
from backend.services.errors import (
    Conflict,
    Corrupt,
    DomainError,
    Forbidden,
    Invalid,
    Malformed,
    NotFound,
    RateLimited,
    TooLarge,
    Unauthenticated,
    Unavailable,
    UnsupportedMedia,
)

log = logging.getLogger(__name__)


# Each kind of domain error and its status; a subclass answers as its nearest listed kind.
_STATUS: dict[type[DomainError], int] = {
    Malformed: 400,
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    TooLarge: 413,
    UnsupportedMedia: 415,
    Invalid: 422,
    RateLimited: 429,
    Corrupt: 500,
    Unavailable: 503,
    DomainError: 400,
}


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
}


def status_of(error: DomainError) -> int:
    return next(_STATUS[kind] for kind in type(error).__mro__ if kind in _STATUS)


def error_body(code: str, message: str, **extra: object) -> dict[str, object]:
    return {"code": code, "message": message, **extra}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain_error(_: Request, exc: DomainError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
        return JSONResponse(error_body(exc.code, exc.message), status_code=status_of(exc), headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return JSONResponse(error_body(code, message), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {"loc": [str(part) for part in err.get("loc", ())], "message": str(err.get("msg", ""))}
            for err in exc.errors()
        ]
        first = problems[0] if problems else {"loc": [], "message": "invalid request"}
        where = ".".join(first["loc"][1:]) or "body"
        return JSONResponse(
            error_body("validation_error", f"{where}: {first['message']}", errors=problems), status_code=422
        )

    @app.exception_handler(OperationalError)
    @app.exception_handler(PoolTimeout)
    async def _database_busy(_: Request, exc: Exception) -> JSONResponse:
        # A locked SQLite database, an exhausted pool or an unreachable server: the request's
        # transaction rolled back, so nothing of it is stored and the client may simply retry.
        log.warning("database unavailable: %s", exc)
        return JSONResponse(
            error_body("database_busy", "the database is busy; nothing was stored, retry shortly"),
            status_code=503,
            headers={"Retry-After": "1"},
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        # Answered outside the middleware stack, so the security headers are added here.
        return JSONResponse(
            error_body("internal_error", "internal server error"), status_code=500, headers=SECURITY_HEADERS
        )
