"""The browser pages (SPEC 7): login, registration and the chat app, plus the static assets.

Pages are Jinja2 templates around ES modules under `/static`; everything the page needs comes
from this server (no CDN). The chat page is only a shell: it reads its data from the JSON API.
A conversation URL of another user answers 404, exactly like a missing one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from backend import i18n
from backend.api.deps import SESSION_COOKIE, Db, app_context, local_model_of
from backend.api.params import ConversationId
from backend.api.routes.shares import ShareToken
from backend.models import User
from backend.services import shares
from backend.services.accounts import auth
from backend.services.conversations import conversations
from backend.services.errors import NotFound

FRONTEND = Path(__file__).resolve().parents[3] / "frontend"
templates = Jinja2Templates(directory=FRONTEND / "templates")
i18n.install(templates.env)
static_files = StaticFiles(directory=FRONTEND / "static")
router = APIRouter(include_in_schema=False)


async def _viewer(request: Request, db: Db) -> User | None:
    cookie = request.cookies.get(SESSION_COOKIE)
    found = await auth.session_user(db, cookie) if cookie else None
    return found[0] if found else None


def _page(request: Request, template: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    user = context.get("user")
    lang = i18n.negotiate(request.headers.get("accept-language"), user.language if user else None)
    context = {**context, "lang": lang, "i18n": i18n.page_catalog(lang)}
    response = templates.TemplateResponse(request, template, context, status_code=status)
    # Pages show account data; the security headers come with every response (web_security).
    response.headers["Cache-Control"] = "no-store"
    return response


def _to_login(request: Request) -> RedirectResponse:
    return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)


def _chat(request: Request, user: User, conversation_id: int | None) -> HTMLResponse:
    server = local_model_of(request)
    boot = {
        "user": _boot_user(user),
        "conversation_id": conversation_id,
        # The page says so and holds messages back while the local model is not ready.
        "local_model": server.status.as_json() if server else None,
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
    except NotFound:
        return _page(request, "not_found.html", {"user": user}, status=404)
    return _chat(request, user, conversation_id)


@router.get("/s/{share_token}", response_class=HTMLResponse)
async def shared_page(share_token: ShareToken, request: Request, db: Db) -> Response:
    """A shared conversation, read-only, for anyone with the link (no account needed)."""
    try:
        document = await shares.shared(db, share_token)
    except NotFound:
        return _page(request, "not_found.html", {"reason": "share_missing"}, status=404)
    return _page(request, "share.html", {"boot": document.model_dump(mode="json"), "title": document.title})


async def _operators_only(request: Request, db: Db, template: str) -> Response:
    """An operators' page; other accounts get the same 404 page as a missing URL."""
    user = await _viewer(request, db)
    if user is None:
        return _to_login(request)
    if not user.is_operator:
        return _page(request, "not_found.html", {"user": user, "reason": "operators_only"}, status=404)
    boot = {"user": _boot_user(user), "registration": _registration(request)}
    return _page(request, template, {"boot": boot, "user": user})


def _boot_user(user: User) -> dict[str, Any]:
    return {"id": user.id, "username": user.username, "is_operator": user.is_operator}


@router.get("/operators", response_class=HTMLResponse)
async def operators_page(request: Request, db: Db) -> Response:
    """The context-metrics dashboard."""
    return await _operators_only(request, db, "dashboard.html")


@router.get("/admin/users", response_class=HTMLResponse)
async def users_page(request: Request, db: Db) -> Response:
    """The operators' users page: accounts, invite codes, the audit log."""
    return await _operators_only(request, db, "admin_users.html")


@router.get("/account", response_class=HTMLResponse)
async def account_page(request: Request, db: Db) -> Response:
    """Password, sessions and API tokens of the logged-in account."""
    user = await _viewer(request, db)
    if user is None:
        return _to_login(request)
    context = {"boot": {"user": _boot_user(user)}, "user": user, "languages": i18n.choices()}
    return _page(request, "account.html", context)


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, db: Db) -> Response:
    if await _viewer(request, db) is not None:
        return RedirectResponse("/", status_code=303)
    return _page(request, "auth.html", {"mode": "login", "registration": _registration(request)})


@router.get("/register", response_class=HTMLResponse)
async def register_page(request: Request, db: Db) -> Response:
    """The sign-up form as CHAT_SHELL_REGISTRATION has it: with an invite code field, or (closed)
    a 404 page that says accounts come from an operator."""
    if await _viewer(request, db) is not None:
        return RedirectResponse("/", status_code=303)
    registration = _registration(request)
    if registration == "closed":
        return _page(request, "not_found.html", {"reason": "registration_closed"}, status=404)
    return _page(request, "auth.html", {"mode": "register", "registration": registration})


def _registration(request: Request) -> str:
    return str(app_context(request).settings.registration)
