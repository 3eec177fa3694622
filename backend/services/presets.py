"""Presets: a user's saved starts for new chats (name, instructions, model)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.models import Preset, User
from backend.services.errors import Conflict, NotFound
from backend.services.model_catalog import ModelCatalog


async def list_own(db: AsyncSession, user: User) -> list[Preset]:
    return list(await db.scalars(select(Preset).where(Preset.owner_id == user.id).order_by(Preset.name)))


async def get_owned(db: AsyncSession, user: User, preset_id: int) -> Preset:
    preset = await db.scalar(select(Preset).where(Preset.id == preset_id, Preset.owner_id == user.id))
    if preset is None:
        raise NotFound.of("preset")
    return preset


async def _require_free_name(db: AsyncSession, user: User, name: str, keep: int | None = None) -> None:
    taken = await db.scalar(select(Preset.id).where(Preset.owner_id == user.id, Preset.name == name))
    if taken is not None and taken != keep:
        raise Conflict("preset_name_taken", f"you already have a preset named {name!r}")


async def create(db: AsyncSession, user: User, fields: dict[str, Any], catalog: ModelCatalog) -> Preset:
    """A new preset; its model, when it names one, must be configured (`unknown_model`)."""
    if fields.get("model_profile") is not None:
        catalog.resolve(fields["model_profile"])
    await _require_free_name(db, user, fields["name"])
    preset = Preset(owner_id=user.id, **fields)
    db.add(preset)
    await db.flush()
    return preset


async def update(
    db: AsyncSession, user: User, preset: Preset, changes: dict[str, Any], catalog: ModelCatalog
) -> None:
    """Applies the fields a client sent (a name of None is no change; a model of None clears it)."""
    if changes.get("model_profile") is not None:
        catalog.resolve(changes["model_profile"])
    if changes.get("name") is not None:
        await _require_free_name(db, user, changes["name"], keep=preset.id)
        preset.name = changes["name"]
    if changes.get("instructions") is not None:
        preset.instructions = changes["instructions"]
    if "model_profile" in changes:
        preset.model_profile = changes["model_profile"]
    await db.flush()


async def delete(db: AsyncSession, preset: Preset) -> None:
    await db.delete(preset)
