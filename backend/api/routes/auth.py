"""Accounts: register, log in and out, sessions, password, API tokens, invite codes."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from backend.api.deps import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    Ctx,
    CurrentOperator,
    CurrentPrincipal,
    CurrentUser,
    Db,
)
from backend.api.params import InviteId, SessionId, TokenId
from backend.api.web_security import request_is_https
from backend.schemas.admin import InviteListItem
from backend.schemas.auth import (
    Credentials,
    InviteCreate,
    InviteOut,
    LanguageChoice,
    LoginOut,
    PasswordChange,
    Registration,
    SessionOut,
    SessionsEnded,
    TokenCreate,
    TokenCreated,
    TokenOut,
    UserOut,
)
from backend.services.accounts import admin, auth
from backend.services.errors import Forbidden

router = APIRouter(prefix="/api/auth", tags=["auth"])


def client_address(request: Request) -> str:
    """The peer, or what the trusted proxy says it is (CHAT_SHELL_TRUSTED_PROXIES)."""
    return request.client.host if request.client else "unknown"


@router.post("/register", status_code=status.HTTP_201_CREATED, response_model=UserOut)
async def register(body: Registration, request: Request, db: Db, ctx: Ctx) -> UserOut:
    """A new account, as `CHAT_SHELL_REGISTRATION` allows (`open`, `invite`: with `invite_code`,
    `closed`); attempts are throttled per client address and per username (429)."""
    await ctx.throttle.attempt("register", client_address(request), body.username)
    user = await auth.register(
        db, ctx.passwords, ctx.settings.registration, body.username, body.password, body.invite_code
    )
    return UserOut.model_validate(user)


@router.post("/login", response_model=LoginOut)
async def login(body: Credentials, request: Request, db: Db, ctx: Ctx, response: Response) -> LoginOut:
    """Opens a browser session; attempts are throttled per client address and per username (429)."""
    await ctx.throttle.attempt("login", client_address(request), body.username)
    user = await auth.authenticate(db, ctx.passwords, body.username, body.password)
    session = await auth.open_session(db, user, ctx.settings.session_days, request.headers.get("user-agent"))
    max_age = ctx.settings.session_days * 86400
    secure = request_is_https(request, ctx.settings)
    response.set_cookie(
        SESSION_COOKIE, session.cookie_value, max_age=max_age, httponly=True, samesite="lax", secure=secure
    )
    # Readable by the page so it can echo it in the X-CSRF-Token header.
    response.set_cookie(CSRF_COOKIE, session.csrf_token, max_age=max_age, samesite="strict", secure=secure)
    return LoginOut(user=UserOut.model_validate(user), csrf_token=session.csrf_token)


@router.post("/logout", status_code=status.HTTP_204_NO_CONTENT)
async def logout(principal: CurrentPrincipal, db: Db, response: Response) -> None:
    if principal.session is not None:
        await auth.close_session(db, principal.session)
    response.delete_cookie(SESSION_COOKIE)
    response.delete_cookie(CSRF_COOKIE)


@router.post("/logout-everywhere", status_code=status.HTTP_204_NO_CONTENT)
async def logout_everywhere(user: CurrentUser, db: Db, response: Response) -> None:
    """Ends every browser session of this account, this one included (API tokens stay)."""
    await auth.close_sessions(db, user)
    response.delete_cookie(SESSION_COOKIE)
    response.delete_cookie(CSRF_COOKIE)


@router.post("/logout-others", response_model=SessionsEnded)
async def logout_others(principal: CurrentPrincipal, db: Db) -> SessionsEnded:
    """Ends every other browser session of this account (this one and API tokens stay)."""
    if principal.session is None:
        raise Forbidden("session_only", "log out other sessions from a logged-in browser session")
    return SessionsEnded(ended=await auth.close_sessions(db, principal.user, keep=principal.session))


@router.get("/sessions", response_model=list[SessionOut])
async def list_sessions(principal: CurrentPrincipal, db: Db) -> list[SessionOut]:
    """The account's live browser sessions, the most recently seen first."""
    current = principal.session.id if principal.session else None
    return [SessionOut.of(session, current) for session in await auth.list_sessions(db, principal.user)]


@router.delete("/sessions/{session_id}", status_code=status.HTTP_204_NO_CONTENT)
async def end_session(session_id: SessionId, principal: CurrentPrincipal, db: Db, response: Response) -> None:
    """Logs one session of this account out (another account's is 404); this one's cookies go too."""
    await auth.close_own_session(db, principal.user, session_id)
    if principal.session is not None and principal.session.id == session_id:
        response.delete_cookie(SESSION_COOKIE)
        response.delete_cookie(CSRF_COOKIE)


@router.post("/password", status_code=status.HTTP_204_NO_CONTENT)
async def change_password(body: PasswordChange, principal: CurrentPrincipal, db: Db, ctx: Ctx) -> None:
    """Needs the current password; every other browser session of the account ends."""
    await auth.change_password(
        db, ctx.passwords, principal.user, body.current_password, body.new_password, principal.session
    )


@router.get("/me", response_model=UserOut)
async def me(user: CurrentUser) -> UserOut:
    return UserOut.model_validate(user)


@router.put("/language", response_model=UserOut)
async def set_language(body: LanguageChoice, user: CurrentUser, db: Db) -> UserOut:
    """The page's language for this account, on every page from the next one it loads."""
    return UserOut.model_validate(await auth.set_language(db, user, body.language))


@router.post("/tokens", status_code=status.HTTP_201_CREATED, response_model=TokenCreated)
async def create_token(body: TokenCreate, principal: CurrentPrincipal, db: Db, ctx: Ctx) -> TokenCreated:
    """From a browser session only: a token cannot make another token (403 `token_cannot_mint`)."""
    if principal.session is None:
        raise Forbidden("token_cannot_mint", "API tokens are made from a logged-in browser session")
    days = body.expires_in_days or ctx.settings.token_days
    created = await auth.create_token(db, principal.user, body.name, days)
    return TokenCreated(**TokenOut.model_validate(created.token).model_dump(), token=created.secret)


@router.get("/tokens", response_model=list[TokenOut])
async def list_tokens(user: CurrentUser, db: Db) -> list[TokenOut]:
    return [TokenOut.model_validate(token) for token in await auth.list_tokens(db, user)]


@router.delete("/tokens/{token_id}", response_model=TokenOut)
async def revoke_token(token_id: TokenId, user: CurrentUser, db: Db) -> TokenOut:
    return TokenOut.model_validate(await auth.revoke_token(db, user, token_id))


@router.post("/invites", status_code=status.HTTP_201_CREATED, response_model=InviteOut)
async def create_invite(body: InviteCreate, operator: CurrentOperator, db: Db, ctx: Ctx) -> InviteOut:
    """Operators: a code that lets one person register (`CHAT_SHELL_REGISTRATION=invite`)."""
    invite = await admin.create_invite(db, operator, body.days or ctx.settings.invite_days)
    return InviteOut(code=invite.code, expires_at=invite.expires_at)


@router.get("/invites", response_model=list[InviteListItem])
async def list_invites(_: CurrentOperator, db: Db) -> list[InviteListItem]:
    """Operators: every invite code, spent or not (the codes themselves were shown once)."""
    return await admin.list_invites(db)


@router.delete("/invites/{invite_id}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_invite(invite_id: InviteId, operator: CurrentOperator, db: Db) -> None:
    """Operators: an unspent code stops working; a spent one is 409 `invite_spent`."""
    await admin.revoke_invite(db, operator, invite_id)
