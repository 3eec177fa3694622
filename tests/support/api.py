"""Client helpers: an authenticated API client per user."""

from __future__ import annotations

import httpx

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
