"""How the gateway answers a request it refuses before a route runs (docs/protocol.md#errors):
always JSON with a stable `code`, like every refusal a route makes itself.

FastAPI's own answers are `{"detail": …}`: a body it cannot parse (400), a request its schema
refuses (422), an unknown path or method (404, 405). These handlers give them a `code` and keep
the details.
"""

from __future__ import annotations

from typing import Final

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

CODES: Final = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
}


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = CODES.get(exc.status_code, "error" if exc.status_code < 500 else "internal_error")
    return JSONResponse(
        {"code": code, "message": str(exc.detail)},
        exc.status_code,
        headers=getattr(exc, "headers", None),
    )


async def _invalid(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {k: v for k, v in error.items() if k in ("loc", "msg", "type")} for error in exc.errors()
    ]
    return JSONResponse(
        {
            "code": "invalid_request",
            "message": "the request does not match the route's schema",
            "errors": jsonable_encoder(errors),
        },
        422,
    )


def install_error_handlers(app: FastAPI) -> None:
    """Answer FastAPI's own refusals as JSON with a `code`."""
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
