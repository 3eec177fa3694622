"""Client helpers: an authenticated API client per user."""

from __future__ import annotations

import httpx
from sqlalchemy import update

from backend.db import create_engine, session_factory
from backend.models import User

PASSWORD = "correct horse battery staple"


async def register(client: httpx.AsyncClient, username: str, password: str = PASSWORD) -> dict:
    response = await client.post("/api/auth/register", json={"username": username, "password": password})
    assert response.status_code == 201, response.text
    return response.json()


async def login(base_url: str, username: str, password: str = PASSWORD) -> httpx.AsyncClient:
    """A browser-like client: session cookie plus the CSRF header on every request."""
    client = httpx.AsyncClient(base_url=base_url, timeout=30)
    response = await client.post("/api/auth/login", json={"username": username, "password": password})
    assert response.status_code == 200, response.text
    client.headers["X-CSRF-Token"] = response.json()["csrf_token"]
    return client


async def new_user(base_url: str, username: str) -> httpx.AsyncClient:
    async with httpx.AsyncClient(base_url=base_url) as anonymous:
        await register(anonymous, username)
    return await login(base_url, username)


async def make_operator(database_url: str, username: str) -> None:
    """Grants an existing account the operator flag (what `chat-shell create-user --operator` sets)."""
    engine = create_engine(database_url)
    try:
        async with session_factory(engine)() as db, db.begin():
            await db.execute(update(User).where(User.username == username).values(is_operator=True))
    finally:
        await engine.dispose()


async def new_operator(base_url: str, database_url: str, username: str) -> httpx.AsyncClient:
    async with httpx.AsyncClient(base_url=base_url) as anonymous:
        await register(anonymous, username)
    await make_operator(database_url, username)
    return await login(base_url, username)
