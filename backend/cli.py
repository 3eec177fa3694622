"""The `chat-shell` console script: serve, worker, migrate, service, create-user, invite, env,
local-model."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import signal
import sys
import time
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

from backend import collector, secret_policy
from backend.logs import configure_logging
from backend.secret_policy import WeakSecret
from backend.settings import RuntimeConfigurationError, Settings, get_settings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from backend.local_model.launch import ServerOptions


def _migrate(settings: Settings) -> None:
    from alembic import command

    from backend.db import alembic_config

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(settings.resolved_database_url), "head")


def _require_free_port(host: str, port: int) -> None:
    """A taken port stops `serve` before anything is installed or started, in one line."""
    from backend.local_model.ports import port_in_use_error, port_is_free

    if not port_is_free(port, host):
        raise SystemExit(
            f"error: {port_in_use_error(port, host, 'choose another with --port (`PORT=8001 make run`)')}"
        )


def _require_shared_stores(settings: Settings, workers: int) -> None:
    """Several workers share turns through the database and live events through Redis."""
    from sqlalchemy.engine import make_url

    from backend.local_model.integration import local_model_wanted

    if workers < 1:
        raise SystemExit("error: --workers must be at least 1")
    if workers == 1:
        return
    if make_url(settings.resolved_database_url).get_backend_name() != "postgresql":
        raise SystemExit(
            "error: --workers needs PostgreSQL: SQLite has a single writer, so workers would queue "
            "on each other. Set CHAT_SHELL_DATABASE_URL=postgresql+asyncpg://... or serve one worker."
        )
    if not settings.redis_url:
        raise SystemExit(
            "error: --workers needs Redis, which carries live events and stops between workers. "
            "Set CHAT_SHELL_REDIS_URL=redis://host:6379/0 or serve one worker."
        )
    if local_model_wanted(settings):
        raise SystemExit(
            "error: --workers needs a configured model provider (OPENAI_BASE_URL); the local model "
            "runs beside one worker only."
        )


def worker_app() -> FastAPI:
    """The app of one of several `serve --workers` processes (each builds its own)."""
    from backend.app import create_app

    settings = get_settings()
    configure_logging(settings.log_level, json_lines=settings.log_json)
    app = create_app(settings)
    collector.freeze_startup_heap()
    collector.defer_full_collections()
    return app


def _serve(args: argparse.Namespace, settings: Settings) -> None:
    from uvicorn.loops.auto import auto_loop_factory

    from backend.local_model.integration import install_model, local_model_wanted

    # Before the model, the migration and the app's imports: a missing secret stops at once.
    secret_policy.require_backend_secrets(settings)

    _require_shared_stores(settings, args.workers)
    _require_free_port(args.host, args.port)
    if args.workers > 1:
        import uvicorn

        if args.migrate:
            _migrate(settings)
        configure_logging(settings.log_level, json_lines=settings.log_json)
        # The app reads forwarded headers itself, from CHAT_SHELL_TRUSTED_PROXIES only.
        uvicorn.run(
            "backend.cli:worker_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_config=None,
            proxy_headers=False,
        )
        return
    if local_model_wanted(settings):
        # Fetched on first run, with progress; a damaged file stops here, with the fix.
        install_model(settings, _progress)
    configure_logging(settings.log_level, json_lines=settings.log_json)
    # The event loop uvicorn.run would choose (uvloop when installed).
    with asyncio.Runner(loop_factory=auto_loop_factory()) as runner:
        runner.run(_serve_app(args, settings))


async def _serve_app(args: argparse.Namespace, settings: Settings) -> None:
    """The local model's server starts first, so it loads the model in its own process while
    this one migrates and imports the app: a repeat start is ready after the longer of the two,
    not their sum. The page answers (saying the model is starting) until the model is ready."""
    from backend.local_model.integration import local_model_wanted, running_local_model

    async with AsyncExitStack() as stack:
        local_model = None
        if local_model_wanted(settings):
            local_model = await stack.enter_async_context(running_local_model(settings))
            await local_model.spawned()
        if args.migrate:
            await asyncio.to_thread(_migrate, settings)  # alembic runs its own event loop
        import uvicorn

        from backend.app import create_app

        app = create_app(settings, local_model=local_model)
        collector.freeze_startup_heap()
        collector.defer_full_collections()
        await uvicorn.Server(
            uvicorn.Config(app, host=args.host, port=args.port, log_config=None, proxy_headers=False)
        ).serve()


def _worker(args: argparse.Namespace, settings: Settings) -> None:
    """Runs turns from the queue: PostgreSQL holds the queue, Redis carries live events to
    the web processes, and a model provider answers (the embedded model runs beside `serve`)."""
    from uvicorn.loops.auto import auto_loop_factory

    from backend.local_model.integration import local_model_wanted
    from backend.turn_hosting import run_worker

    secret_policy.require_backend_secrets(settings)
    if not settings.turns_on_queue:
        raise SystemExit(
            "error: worker needs PostgreSQL, which holds the job queue: set "
            "CHAT_SHELL_DATABASE_URL=postgresql+asyncpg://... (on SQLite `serve` runs every turn itself)."
        )
    if not settings.redis_url:
        raise SystemExit(
            "error: worker needs Redis, which carries each reply to the web processes as it is "
            "written: set CHAT_SHELL_REDIS_URL=redis://host:6379/0 (or run the worker inside "
            "`serve` with CHAT_SHELL_WORKER_IN_PROCESS=true)."
        )
    if args.concurrency is not None and args.concurrency < 1:
        raise SystemExit("error: --concurrency must be at least 1")
    if local_model_wanted(settings):
        raise SystemExit(
            "error: worker needs a configured model provider (OPENAI_BASE_URL or CHAT_SHELL_MODELS); "
            "the embedded local model runs inside `serve` only (CHAT_SHELL_WORKER_IN_PROCESS=true)."
        )
    if args.migrate:
        _migrate(settings)
    with asyncio.Runner(loop_factory=auto_loop_factory()) as runner:
        runner.run(run_worker(settings, args.concurrency))


def _service(args: argparse.Namespace, settings: Settings) -> None:
    secret_policy.require_service_token(settings)
    secret_policy.require_metrics_token(settings)
    import uvicorn

    from backend.runtime_factory import create_service_app

    configure_logging(settings.log_level, json_lines=settings.log_json)
    app = create_service_app(settings)
    collector.freeze_startup_heap()
    uvicorn.run(app, host=args.host, port=args.port, log_config=None, proxy_headers=False)


def _progress(text: str) -> None:
    print(f"local model: {text}", file=sys.stderr, flush=True)


async def _check_decodes(options: ServerOptions) -> float:
    """Start the server once and wait for its verifying decode; the seconds it took."""
    from backend.local_model.status import LocalModelError
    from backend.local_model.supervisor import LocalModelServer

    started = time.monotonic()
    server = LocalModelServer(options)
    server.start()
    try:
        status = await server.settled()
        if status.state == "failed":
            raise LocalModelError(f"{status.message} Last lines of the log:\n{server.log_tail()}")
    finally:
        await server.stop()
    return time.monotonic() - started


async def _serve_model(options: ServerOptions) -> None:
    """The supervised server in the foreground until SIGTERM/SIGINT; an error once it failed."""
    from backend.local_model.status import LocalModelError
    from backend.local_model.supervisor import LocalModelServer

    server = LocalModelServer(options)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)

    async def until_failed() -> None:
        while server.status.state != "failed":
            await server.changed()

    server.start()
    failed = asyncio.create_task(until_failed())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({failed, stopped}, return_when=asyncio.FIRST_COMPLETED)
    failed.cancel()
    stopped.cancel()
    await server.stop()
    if server.status.state == "failed":
        raise LocalModelError(server.status.message)


def _local_model(args: argparse.Namespace, settings: Settings) -> None:
    from backend.local_model import integration
    from backend.local_model.model_file import is_verified

    if args.action == "install":
        integration.install_model(settings, _progress, force=args.force)
        served = integration.model_file(settings)
        _progress(f"checking that {served.model_id} answers (a real decode of a few tokens)")
        seconds = asyncio.run(_check_decodes(integration.server_options(settings, served)))
        print(
            f"local model ready: {served.model_id} from {served.path} (answered {seconds:.1f} s after start)"
        )
    elif args.action == "status":
        model = integration.chosen_model(settings)
        path = settings.local_model_file or integration.model_cache(settings) / model.filename
        print(f"model:    {integration.model_id(settings)} ({model.title}; {model.provenance})")
        print(f"file:     {path} ({'verified' if is_verified(model, path) else 'not verified'})")
        print(f"speeds:   {model.speeds} on 2 cores")
        print(f"runtime:  {settings.local_model_server or _runtime_version()}")
        served = integration.model_file(settings)
        integration.server_options(settings, served)
        print("ready to serve")
    else:
        configure_logging(settings.log_level, json_lines=settings.log_json)
        integration.install_model(settings, _progress)
        served = integration.model_file(settings)
        options = integration.server_options(
            settings, served, host=args.host, preferred_port=args.port, fixed_port=True
        )
        _progress(f"serving {served.model_id} on {args.host}:{args.port}")
        asyncio.run(_serve_model(options))


def _runtime_version() -> str:
    from importlib import metadata

    try:
        return f"xllamacpp {metadata.version('xllamacpp')} (prebuilt, AVX2; no AMX backend)"
    except metadata.PackageNotFoundError:
        return "xllamacpp is not installed: run `bash scripts/setup.sh`"


async def _create_user(settings: Settings, username: str, password: str, operator: bool) -> None:
    from backend.db import check_schema, create_engine, session_factory, transaction
    from backend.services.accounts import admin, auth
    from backend.services.errors import DomainError

    engine = create_engine(settings.resolved_database_url)
    try:
        await check_schema(engine)
        passwords = auth.Passwords(settings.password_hash_profile)
        try:
            async with transaction(session_factory(engine)) as db:
                user = await admin.create_user(db, passwords, None, username, password, operator=operator)
        finally:
            passwords.close()
        print(f"created {'operator' if operator else 'user'} {user.username} (id {user.id})")
    except DomainError as exc:
        raise SystemExit(f"error: {exc.message}") from None
    finally:
        await engine.dispose()


async def _create_invite(settings: Settings, days: int) -> None:
    from backend.db import check_schema, create_engine, session_factory, transaction
    from backend.services.accounts import admin

    engine = create_engine(settings.resolved_database_url)
    try:
        await check_schema(engine)
        async with transaction(session_factory(engine)) as db:
            invite = await admin.create_invite(db, None, days)
    finally:
        await engine.dispose()
    print(invite.code)
    note = "" if settings.registration == "invite" else f" (registration is {settings.registration!r} now)"
    print(f"valid until {invite.expires_at:%Y-%m-%d %H:%M} UTC, for one account{note}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="chat-shell", description="Chat Shell service and tools.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the backend with chat_shell in package mode")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--migrate", action="store_true", help="migrate the database first")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes on one machine (more than 1 needs PostgreSQL and Redis)",
    )

    worker = sub.add_parser("worker", help="run turns from the job queue (PostgreSQL and Redis)")
    worker.add_argument(
        "--concurrency", type=int, default=None, help="turns at once (default CHAT_SHELL_WORKER_CONCURRENCY)"
    )
    worker.add_argument("--migrate", action="store_true", help="migrate the database first")

    sub.add_parser("migrate", help="create or upgrade the database schema")

    service = sub.add_parser("service", help="run chat_shell alone (service mode)")
    service.add_argument("--host", default="127.0.0.1")
    service.add_argument("--port", type=int, default=8100)

    create_user = sub.add_parser("create-user", help="create an account")
    create_user.add_argument("username")
    create_user.add_argument(
        "--operator", action="store_true", help="may manage users (/admin/users) and see the dashboard"
    )
    create_user.add_argument(
        "--password-env", metavar="VAR", help="read the password from this environment variable"
    )

    invite = sub.add_parser("invite", help="invite codes for CHAT_SHELL_REGISTRATION=invite")
    invite_actions = invite.add_subparsers(dest="action", required=True)
    invite_create = invite_actions.add_parser("create", help="print a new code that lets one person register")
    invite_create.add_argument(
        "--days", type=int, help="how long it is valid (default CHAT_SHELL_INVITE_DAYS)"
    )

    env = sub.add_parser("env", help="write a .env with fresh random secrets for docker compose")
    env.add_argument("--path", default=".env")
    env.add_argument("--force", action="store_true", help="replace an existing file")

    local = sub.add_parser("local-model", help="install, check or serve the embedded local model")
    local_actions = local.add_subparsers(dest="action", required=True)
    install = local_actions.add_parser(
        "install", help="download and verify the model (once, cached), then check that it answers"
    )
    install.add_argument("--force", action="store_true", help="download the model file again")
    local_actions.add_parser("status", help="what is installed and whether it can be served")
    local_serve = local_actions.add_parser("serve", help="run the supervised model server in the foreground")
    local_serve.add_argument("--host", default="127.0.0.1")
    local_serve.add_argument("--port", type=int, default=8080)

    args = parser.parse_args(argv)
    if args.command == "env":
        # Before reading settings: an old .env must not stop it from writing a new one.
        secret_policy.main(["--path", args.path, *(["--force"] if args.force else [])])
        return
    settings = get_settings()
    if args.command in ("serve", "worker", "service", "local-model"):
        from backend.local_model.installer import InstallError
        from backend.local_model.model_file import ModelFileError
        from backend.local_model.status import LocalModelError

        commands = {"serve": _serve, "worker": _worker, "service": _service, "local-model": _local_model}
        try:
            commands[args.command](args, settings)
        except (RuntimeConfigurationError, WeakSecret, InstallError, ModelFileError, LocalModelError) as exc:
            raise SystemExit(f"error: {exc}") from None
    elif args.command == "migrate":
        _migrate(settings)
        print("database is at the latest schema")
    elif args.command == "invite":
        asyncio.run(_create_invite(settings, args.days or settings.invite_days))
    elif args.command == "create-user":
        if args.password_env:
            password = os.environ.get(args.password_env, "")
        elif sys.stdin.isatty():
            password = getpass.getpass("password: ")
        else:
            password = sys.stdin.readline().rstrip("\n")
        asyncio.run(_create_user(settings, args.username, password, args.operator))


if __name__ == "__main__":
    main()
