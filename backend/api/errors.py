"""JSON errors with a stable `code` (SPEC 6.1): every failure a client sees has this shape."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error a client can act on. Raised by services and routes; rendered as JSON."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def not_found(what: str) -> ApiError:
    # Other users' objects answer exactly like missing ones (SPEC 6.5).
    return ApiError(404, "not_found", f"{what} not found")


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


def error_body(code: str, message: str, **extra: object) -> dict[str, object]:
    return {"code": code, "message": message, **extra}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.status, headers=exc.headers)

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
        return JSONResponse(error_body("internal_error", "internal server error"), status_code=500)
