"""Accounts: register, log in and out, API tokens."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from backend.api.deps import CSRF_COOKIE, SESSION_COOKIE, Ctx, CurrentPrincipal, CurrentUser, Db
from backend.api.errors import ApiError
from backend.schemas.auth import Credentials, LoginOut, TokenCreate, TokenCreated, TokenOut, UserOut
from backend.services import auth

router = APIRouter(prefix="/api/auth", tags=["auth"])


@router.post("/register", status_code=status.HTTP_201_CREATED, response_model=UserOut)
async def register(body: Credentials, db: Db, ctx: Ctx) -> UserOut:
    if not ctx.settings.allow_registration:
        raise ApiError(403, "registration_closed", "registration is closed; ask an operator for an account")
    user = await auth.create_user(db, ctx.passwords, body.username, body.password)
    return UserOut.model_validate(user)


@router.post("/login", response_model=LoginOut)
async def login(body: Credentials, db: Db, ctx: Ctx, response: Response) -> LoginOut:
    user = await auth.authenticate(db, ctx.passwords, body.username, body.password)
    session = await auth.open_session(db, user, ctx.settings.session_days)
    max_age = ctx.settings.session_days * 86400
    secure = ctx.settings.cookie_secure
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


@router.get("/me", response_model=UserOut)
async def me(user: CurrentUser) -> UserOut:
    return UserOut.model_validate(user)


@router.post("/tokens", status_code=status.HTTP_201_CREATED, response_model=TokenCreated)
async def create_token(body: TokenCreate, user: CurrentUser, db: Db) -> TokenCreated:
    created = await auth.create_token(db, user, body.name, body.expires_in_days)
    return TokenCreated(**TokenOut.model_validate(created.token).model_dump(), token=created.secret)


@router.get("/tokens", response_model=list[TokenOut])
async def list_tokens(user: CurrentUser, db: Db) -> list[TokenOut]:
    return [TokenOut.model_validate(token) for token in await auth.list_tokens(db, user)]


@router.delete("/tokens/{token_id}", response_model=TokenOut)
async def revoke_token(token_id: int, user: CurrentUser, db: Db) -> TokenOut:
    return TokenOut.model_validate(await auth.revoke_token(db, user, token_id))
