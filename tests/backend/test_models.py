"""Several models from several providers (CHAT_SHELL_MODELS) as a user and an operator meet
them: the list to choose from, a conversation's model changing between turns, the meter's
window following it, an unknown model, a provider that is down, a key that is not set."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from backend.app import create_app
from backend.services.model_catalog import ModelConfigurationError, read_models_file
from backend.settings import Settings
from chat_shell.providers.profiles import LOCAL_MODEL_NAME
from tests.support.api import assistant_reply, signed_in
from tests.support.local_model import ROOT, local_model_ready, standin_command, write_gguf
from tests.support.scripted_provider import ScriptedProvider, served_provider, text
from tests.support.servers import serve

SECRET = "sk-cloud-secret-4242"


@pytest.fixture
async def cloud() -> AsyncIterator[ScriptedProvider]:
    """The second provider (the first is the `scripted_provider` fixture)."""
    async with served_provider() as provider:
        yield provider


def models_file(tmp_path: Path, local: str, cloud: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(
        f"""
default = "house"

[[models]]
id = "house"
label = "House model"
base_url = "{local}"
model = "qwen2.5-7b-instruct"
profile = {{ context_window = 32000, max_output_tokens = 2000 }}

[[models]]
id = "cloud-mini"
label = "Cloud mini"
base_url = "{cloud}"
api_key_env = "CLOUD_KEY"
model = "gpt-4o-mini"
accepts_images = true
summarizer = "house"

[[models]]
id = "broken"
label = "Broken provider"
base_url = "http://127.0.0.1:9/v1"
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def two_provider_settings(
    make_settings: Callable[..., Settings],
    scripted_provider: ScriptedProvider,
    cloud: ScriptedProvider,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[str], Settings]:
    monkeypatch.setenv("CLOUD_KEY", SECRET)
    path = models_file(tmp_path, scripted_provider.base_url, cloud.base_url)
    return lambda database_url: make_settings(database_url, models=path, provider_timeout_seconds=10)


async def test_the_model_list_shows_labels_and_windows_but_never_keys_or_urls(
    sqlite_url: str, two_provider_settings: Callable[[str], Settings], cloud: ScriptedProvider
) -> None:
    async with serve(create_app(two_provider_settings(sqlite_url))) as base_url:
        async with signed_in(base_url, "picker") as client:
            listed = await client.get("/api/models")
        async with httpx.AsyncClient(base_url=base_url) as anonymous:
            refused = await anonymous.get("/api/models")
    assert listed.status_code == 200
    body = listed.json()
    assert body["default"] == "house"
    assert [(m["id"], m["label"], m["accepts_images"]) for m in body["models"]] == [
        ("house", "House model", False),
        ("cloud-mini", "Cloud mini", True),
        ("broken", "Broken provider", False),
    ]
    house, mini, _ = body["models"]
    assert (house["context_window"], house["max_output_tokens"]) == (32_000, 2_000)
    assert mini["context_window"] == 128_000 and 0 < mini["trigger"] < mini["available_input"] < 128_000
    # The meter turns to "nearing the threshold" from the same number the server reports by.
    assert mini["trigger"] * 0.9 <= mini["warning_from"] < mini["trigger"]
    assert SECRET not in listed.text and "127.0.0.1" not in listed.text and cloud.base_url not in listed.text
    assert refused.status_code == 401


async def test_a_conversations_model_changes_between_turns_and_the_budget_follows_it(
    database_url: str,
    two_provider_settings: Callable[[str], Settings],
    scripted_provider: ScriptedProvider,
    cloud: ScriptedProvider,
) -> None:
    async with (
        serve(create_app(two_provider_settings(database_url))) as base_url,
        signed_in(base_url, "switcher") as client,
    ):
        created = (await client.post("/api/conversations", json={"title": "two models"})).json()
        cid = created["id"]
        scripted_provider.script(text("house answer"))
        first = await assistant_reply(client, cid, "hello house")
        changed = await client.patch(f"/api/conversations/{cid}", json={"model_profile": "cloud-mini"})
        context = (await client.get(f"/api/conversations/{cid}/context")).json()
        cloud.script(text("cloud answer"))
        second = await assistant_reply(client, cid, "hello cloud")
    assert created["model_profile"] is None  # the default model answers
    assert first["result"]["value"] == "house answer" and second["result"]["value"] == "cloud answer"
    assert [body["model"] for body in scripted_provider.chat_requests] == ["qwen2.5-7b-instruct"]
    assert [body["model"] for body in cloud.chat_requests] == ["gpt-4o-mini"]
    # The cloud model saw the whole conversation, the house model's reply included.
    assert "house answer" in json.dumps(cloud.chat_requests[0]["messages"])
    assert changed.status_code == 200 and changed.json()["model_profile"] == "cloud-mini"
    assert context["model"] == "cloud-mini"
    assert first["result"]["context_metrics"]["context_window"] == 32_000
    assert second["result"]["context_metrics"]["context_window"] == 128_000
    assert second["result"]["context_metrics"]["profile"] == "cloud-mini"


async def test_a_model_not_in_the_list_is_refused_with_unknown_model(
    sqlite_url: str, two_provider_settings: Callable[[str], Settings]
) -> None:
    async with (
        serve(create_app(two_provider_settings(sqlite_url))) as base_url,
        signed_in(base_url, "guesser") as client,
    ):
        created = await client.post("/api/conversations", json={"model_profile": "gpt-5"})
        cid = (await client.post("/api/conversations", json={"model_profile": "cloud-mini"})).json()["id"]
        patched = await client.patch(f"/api/conversations/{cid}", json={"model_profile": "gpt-5"})
        kept = (await client.get(f"/api/conversations/{cid}")).json()
    for refused in (created, patched):
        assert refused.status_code == 422
        assert refused.json()["code"] == "unknown_model" and "'gpt-5'" in refused.json()["message"]
    assert kept["model_profile"] == "cloud-mini"


async def test_a_model_whose_provider_is_down_fails_naming_it_and_the_others_keep_working(
    sqlite_url: str, two_provider_settings: Callable[[str], Settings], cloud: ScriptedProvider
) -> None:
    async with (
        serve(create_app(two_provider_settings(sqlite_url))) as base_url,
        signed_in(base_url, "unlucky") as client,
    ):
        down = (await client.post("/api/conversations", json={"model_profile": "broken"})).json()["id"]
        up = (await client.post("/api/conversations", json={"model_profile": "cloud-mini"})).json()["id"]
        failed = await assistant_reply(client, down, "anyone there?")
        cloud.script(text("I am"))
        answered = await assistant_reply(client, up, "anyone there?")
    assert failed["status"] == "failed"
    error = failed["result"]["error"]
    assert error["code"] == "provider_unavailable" and error["message"].startswith("Model 'broken':")
    assert answered["status"] == "completed" and answered["result"]["value"] == "I am"


def test_a_key_variable_missing_from_the_environment_stops_the_start_naming_it(
    sqlite_url: str, two_provider_settings: Callable[[str], Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = two_provider_settings(sqlite_url)
    monkeypatch.delenv("CLOUD_KEY")
    with pytest.raises(ModelConfigurationError, match=r"'cloud-mini'.*CLOUD_KEY"):
        create_app(settings)


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ('{"models": []}', "models"),
        (
            '{"models": [{"id": "a", "base_url": "http://x/v1"}, {"id": "a", "base_url": "http://y/v1"}]}',
            "repeated",
        ),
        ('{"models": [{"id": "a", "base_url": "http://x/v1", "summarizer": "b"}]}', "summarizer 'b'"),
        ('{"models": [{"id": "a", "base_url": "http://x/v1", "profile": {"window": 4}}]}', "unknown field"),
        ('{"default": "b", "models": [{"id": "a", "base_url": "http://x/v1"}]}', "default 'b'"),
        ("{not json", "not valid json"),
    ],
)
def test_a_bad_models_file_stops_the_start_saying_what_is_wrong(
    sqlite_url: str, make_settings: Callable[..., Settings], tmp_path: Path, document: str, problem: str
) -> None:
    path = tmp_path / "models.json"
    path.write_text(document, encoding="utf-8")
    with pytest.raises(ModelConfigurationError, match=f"CHAT_SHELL_MODELS: {path}.*{problem}"):
        create_app(make_settings(sqlite_url, models=path))


async def test_the_single_provider_settings_are_a_one_entry_list(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(sqlite_url, model="gpt-4o", openai_api_key=SECRET)
    async with serve(create_app(settings)) as base_url, signed_in(base_url, "classic") as client:
        listed = (await client.get("/api/models")).json()
    assert listed == {
        "default": "gpt-4o",
        "models": [
            {
                "id": "gpt-4o",
                "label": "gpt-4o",
                "accepts_images": False,
                "context_window": 128_000,
                "max_output_tokens": 16_384,
                "available_input": listed["models"][0]["available_input"],
                "trigger": listed["models"][0]["trigger"],
                "warning_from": listed["models"][0]["warning_from"],
            }
        ],
    }


async def test_an_installed_local_model_is_one_more_entry_and_only_its_turns_wait_for_it(
    sqlite_url: str, two_provider_settings: Callable[[str], Settings], cloud: ScriptedProvider, tmp_path: Path
) -> None:
    loaded = tmp_path / "loaded"
    settings = two_provider_settings(sqlite_url).model_copy(
        update={
            "local_model": "auto",
            "local_model_file": write_gguf(tmp_path / "stand-in.gguf"),
            "local_model_server": standin_command(ready_when=loaded),
        }
    )
    app = create_app(settings)
    async with serve(app) as base_url, signed_in(base_url, "mixed") as client:
        listed = (await client.get("/api/models")).json()
        local_id = listed["models"][-1]["id"]
        local = (await client.post("/api/conversations", json={"model_profile": local_id})).json()["id"]
        remote = (await client.post("/api/conversations", json={"model_profile": "cloud-mini"})).json()["id"]
        early = await client.post(f"/api/conversations/{local}/messages", json={"content": "hi"})
        cloud.script(text("no waiting here"))
        answered = await assistant_reply(client, remote, "hi")
        loaded.touch()
        await local_model_ready(app)
        later = await assistant_reply(client, local, "hi again")
    assert listed["default"] == "house"
    assert [m["id"] for m in listed["models"]][:3] == ["house", "cloud-mini", "broken"]
    assert local_id == LOCAL_MODEL_NAME and listed["models"][-1]["label"] == f"{local_id} (local)"
    assert early.status_code == 503 and early.json()["code"] == "local_model_starting"
    assert answered["status"] == "completed" and answered["result"]["value"] == "no waiting here"
    assert later["status"] == "completed"


def test_the_documented_example_is_a_valid_models_file(tmp_path: Path) -> None:
    features = (ROOT / "docs" / "features.md").read_text(encoding="utf-8")
    example = features.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "models.toml"
    path.write_text(example, encoding="utf-8")
    document = read_models_file(path)
    assert [entry.id for entry in document.models] == ["house", "gpt-4o", "gpt-4o-mini"]
    assert {entry.base_url for entry in document.models} == {
        "http://10.0.0.5:8080/v1",
        "https://api.openai.com/v1",
    }
