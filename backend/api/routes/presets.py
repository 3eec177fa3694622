"""A user's presets: saved instructions and model to start new chats from."""

from __future__ import annotations

from fastapi import APIRouter, status

from backend.api.deps import Ctx, CurrentUser, Db
from backend.api.params import PresetId
from backend.schemas.conversations import PresetCreate, PresetOut, PresetUpdate
from backend.services import presets

router = APIRouter(prefix="/api/presets", tags=["presets"])


@router.get("", response_model=list[PresetOut])
async def list_presets(user: CurrentUser, db: Db) -> list[PresetOut]:
    return [PresetOut.of(preset) for preset in await presets.list_own(db, user)]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=PresetOut)
async def create_preset(body: PresetCreate, user: CurrentUser, db: Db, ctx: Ctx) -> PresetOut:
    return PresetOut.of(await presets.create(db, user, body.model_dump(), ctx.runner.catalog))


@router.patch("/{preset_id}", response_model=PresetOut)
async def update_preset(
    preset_id: PresetId, body: PresetUpdate, user: CurrentUser, db: Db, ctx: Ctx
) -> PresetOut:
    preset = await presets.get_owned(db, user, preset_id)
    await presets.update(db, user, preset, body.model_dump(exclude_unset=True), ctx.runner.catalog)
    return PresetOut.of(preset)


@router.delete("/{preset_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_preset(preset_id: PresetId, user: CurrentUser, db: Db) -> None:
    await presets.delete(db, await presets.get_owned(db, user, preset_id))
