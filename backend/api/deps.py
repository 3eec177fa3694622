"""Request dependencies: database session, the current user, CSRF protection."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession

from backend.context import AppContext
from backend.local_model.supervisor import LocalModelServer
from backend.models import ApiToken, Session, User
from backend.services.accounts import auth
from backend.services.errors import Forbidden, Unauthenticated

SESSION_COOKIE = "chat_shell_session"
CSRF_COOKIE = "chat_shell_csrf"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def local_model_of(request: Request) -> LocalModelServer | None:
    """The app's local model server, when it runs one."""
    return getattr(request.app.state, "local_model", None)


def app_context(request: Request) -> AppContext:
    return request.app.state.ctx


async def get_db(request: Request) -> AsyncIterator[AsyncSession]:
    """One transaction per request, committed before the response is sent."""
    async with app_context(request).sessions() as db, db.begin():
        yield db


Db = Annotated[AsyncSession, Depends(get_db, scope="function")]
Ctx = Annotated[AppContext, Depends(app_context)]


@dataclass(frozen=True)
class Principal:
    user: User
    session: Session | None  # None when authenticated by bearer token
    token: ApiToken | None = None  # the bearer token, when authenticated by one


async def current_principal(request: Request) -> Principal:
    # Its own short transaction: a request that runs long (`?wait=true`, SSE) holds no connection.
    async with app_context(request).sessions() as db, db.begin():
        return await _authenticate(request, db)


async def _authenticate(request: Request, db: AsyncSession) -> Principal:
    authorization = request.headers.get("authorization", "")
    if authorization:
        scheme, _, secret = authorization.partition(" ")
        if scheme.lower() != "bearer" or not secret:
            raise Unauthenticated("unauthorized", "use 'Authorization: Bearer <token>'")
        found = await auth.token_user(db, secret.strip())
        if found is None:
            raise Unauthenticated("invalid_token", "the API token is unknown, expired or revoked")
        return Principal(found[0], None, found[1])
    cookie = request.cookies.get(SESSION_COOKIE)
    signed_in = await auth.session_user(db, cookie) if cookie else None
    if signed_in is None:
        raise Unauthenticated("unauthorized", "log in or send an API token")
    user, session = signed_in
    # Browser requests that change state must echo the session's CSRF token (double submit).
    if request.method not in SAFE_METHODS:
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), session.csrf_token.encode()):
            raise Forbidden("csrf_failed", f"missing or wrong {CSRF_HEADER} header")
    return Principal(user, session)


async def current_user(principal: Annotated[Principal, Depends(current_principal)]) -> User:
    return principal.user


async def current_operator(user: Annotated[User, Depends(current_user)]) -> User:
    if not user.is_operator:
        raise Forbidden("operator_only", "this page is for operator accounts")
    return user


CurrentPrincipal = Annotated[Principal, Depends(current_principal)]
CurrentUser = Annotated[User, Depends(current_user)]
CurrentOperator = Annotated[User, Depends(current_operator)]
