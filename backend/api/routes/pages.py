"""The browser pages (SPEC 7): login, registration and the chat app, plus the static assets.

Pages are Jinja2 templates around ES modules under `/static`; everything the page needs comes
from this server (no CDN). The chat page is only a shell: it reads its data from the JSON API.
A conversation URL of another user answers 404, exactly like a missing one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from backend.api.deps import SESSION_COOKIE, Db
from backend.api.errors import ApiError
from backend.models import User
from backend.services import auth, conversations

FRONTEND = Path(__file__).resolve().parents[3] / "frontend"
templates = Jinja2Templates(directory=FRONTEND / "templates")
static_files = StaticFiles(directory=FRONTEND / "static")
router = APIRouter(include_in_schema=False)

# Scripts and styles only from this origin; no inline script runs (boot data is inert JSON).
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
ConversationId = Annotated[int, PathParam(ge=1, le=2**63 - 1)]


async def _viewer(request: Request, db: Db) -> User | None:
    cookie = request.cookies.get(SESSION_COOKIE)
    found = await auth.session_user(db, cookie) if cookie else None
    return found[0] if found else None


def _page(request: Request, template: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    response = templates.TemplateResponse(request, template, context, status_code=status)
    response.headers.update(SECURITY_HEADERS)
    return response


def _to_login(request: Request) -> RedirectResponse:
    return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)


def _chat(request: Request, user: User, conversation_id: int | None) -> HTMLResponse:
    boot = {
        "user": {"id": user.id, "username": user.username, "is_operator": user.is_operator},
        "conversation_id": conversation_id,
    }
    return _page(request, "chat.html", {"boot": boot, "user": user})


@router.get("/", response_class=HTMLResponse)
async def home(request: Request, db: Db) -> Response:
    user = await _viewer(request, db)
    return _to_login(request) if user is None else _chat(request, user, None)


@router.get("/c/{conversation_id}", response_class=HTMLResponse)
async def conversation_page(conversation_id: ConversationId, request: Request, db: Db) -> Response:
    user = await _viewer(request, db)
    if user is None:
        return _to_login(request)
    try:
        await conversations.get_owned(db, user, conversation_id)
    except ApiError:
        return _page(request, "not_found.html", {"user": user}, status=404)
    return _chat(request, user, conversation_id)


@router.get("/operators", response_class=HTMLResponse)
async def operators_page(request: Request, db: Db) -> Response:
    """The context-metrics dashboard; other accounts get the same 404 page as a missing URL."""
    user = await _viewer(request, db)
    if user is None:
        return _to_login(request)
    if not user.is_operator:
        context = {
            "user": user,
            "heading": "Page not found",
            "detail": "There is nothing here for this account.",
        }
        return _page(request, "not_found.html", context, status=404)
    boot = {"user": {"id": user.id, "username": user.username, "is_operator": True}}
    return _page(request, "dashboard.html", {"boot": boot, "user": user})


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, db: Db) -> Response:
    if await _viewer(request, db) is not None:
        return RedirectResponse("/", status_code=303)
    return _page(request, "auth.html", {"mode": "login"})


@router.get("/register", response_class=HTMLResponse)
async def register_page(request: Request, db: Db) -> Response:
    if await _viewer(request, db) is not None:
        return RedirectResponse("/", status_code=303)
    return _page(request, "auth.html", {"mode": "register"})
