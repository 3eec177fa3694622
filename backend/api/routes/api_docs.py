"""`GET /docs`: Swagger UI for `/openapi.json`, its assets served from the `fastapi-offline`
package (Swagger UI 5, which reads OpenAPI 3.1; nothing from a CDN, so it works offline and
under the same CSP as every page). Off with CHAT_SHELL_API_DOCS=false."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from backend.api.routes.pages import templates

ASSETS_PATH = "/docs-assets"
assets = StaticFiles(directory=str(files("fastapi_offline") / "static"))
router = APIRouter(include_in_schema=False)


@router.get("/docs", response_class=HTMLResponse)
async def api_docs(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "api_docs.html", {"assets": ASSETS_PATH})
