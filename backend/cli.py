"""The `chat-shell` console script: serve, migrate, service, create-user, local-model."""

from __future__ import annotations

import argparse
import asyncio
import gc
import getpass
import os
import sys
from typing import TYPE_CHECKING

from backend.logs import configure_logging
from backend.settings import Settings, get_settings

if TYPE_CHECKING:
    from backend.local_model.supervisor import ServerOptions


def _migrate(settings: Settings) -> None:
    from alembic import command

    from backend.db import alembic_config

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(settings.resolved_database_url), "head")


def _freeze_startup_heap() -> None:
    """Moves every object alive now (imported modules, classes, compiled schemas: they live as
    long as the server) into the collector's permanent generation. Otherwise every full
    collection walks them all again: 150-290 ms pauses at about 400,000 objects on a 2-core
    machine, each one stalling every live stream (`bench.bench_delivery`)."""
    gc.collect()
    gc.freeze()


def _serve(args: argparse.Namespace, settings: Settings) -> None:
    import uvicorn

    from backend.app import create_app
    from backend.local_model.integration import local_model_wanted

    if args.migrate:
        _migrate(settings)
    if local_model_wanted(settings):
        # A missing or damaged model file stops here, with the fix.
        _install_local_model(settings, force=False)
    configure_logging(settings.log_level, json_lines=settings.log_json)
    app = create_app(settings)
    _freeze_startup_heap()
    uvicorn.run(app, host=args.host, port=args.port, log_config=None)


def _service(args: argparse.Namespace, settings: Settings) -> None:
    import uvicorn

    from backend.runtime_factory import create_service_app

    configure_logging(settings.log_level, json_lines=settings.log_json)
    app = create_service_app(settings)
    _freeze_startup_heap()
    uvicorn.run(app, host=args.host, port=args.port, log_config=None)


def _progress(text: str) -> None:
    print(f"local model: {text}", file=sys.stderr, flush=True)


def _install_local_model(settings: Settings, *, force: bool) -> ServerOptions:
    """Installs what is missing, then verifies what the server would run."""
    from backend.local_model.installer import ensure_installed
    from backend.local_model.integration import server_options

    report = ensure_installed(_progress, cache_root=settings.wheel_cache, force=force)
    options = server_options(settings)
    if report.installed:
        how = "built the server wheel and installed" if report.built_wheel else "installed"
        _progress(f"{how} in {report.seconds:.0f} s; model file {options.model_file}")
    return options


def _local_model(args: argparse.Namespace, settings: Settings) -> None:
    from backend.local_model import installer
    from backend.local_model.integration import server_options
    from backend.local_model.model_file import packaged_model_path
    from backend.local_model.supervisor import server_command, server_env

    if args.action == "install":
        print(f"local model ready: {_install_local_model(settings, force=args.force).model_file}")
    elif args.action == "status":
        cache = installer.wheel_cache_dir(settings.wheel_cache)
        print(f"wheel cache:   {installer.cached_wheel(cache) or f'no wheel in {cache}'}")
        print(f"server:        {'installed' if installer.server_installed() else 'not installed'}")
        print(f"model package: {'installed' if installer.model_installed() else 'not installed'}")
        print(f"model file:    {settings.local_model_file or packaged_model_path()}")
        server_options(settings)
        print("ready to serve")
    else:
        options = server_options(settings)
        command = server_command(options, args.port, args.host)
        os.execve(command[0], command, server_env())


async def _create_user(settings: Settings, username: str, password: str, operator: bool) -> None:
    from backend.api.errors import ApiError
    from backend.db import check_schema, create_engine, session_factory, transaction
    from backend.services import auth

    engine = create_engine(settings.resolved_database_url)
    try:
        await check_schema(engine)
        async with transaction(session_factory(engine)) as db:
            passwords = auth.Passwords(settings.password_hash_profile)
            user = await auth.create_user(db, passwords, username, password, operator=operator)
        print(f"created {'operator' if operator else 'user'} {user.username} (id {user.id})")
    except ApiError as exc:
        raise SystemExit(f"error: {exc.message}") from None
    finally:
        await engine.dispose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="chat-shell", description="Chat Shell service and tools.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the backend with chat_shell in package mode")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--migrate", action="store_true", help="migrate the database first")

    sub.add_parser("migrate", help="create or upgrade the database schema")

    service = sub.add_parser("service", help="run chat_shell alone (service mode)")
    service.add_argument("--host", default="127.0.0.1")
    service.add_argument("--port", type=int, default=8100)

    create_user = sub.add_parser("create-user", help="create an account")
    create_user.add_argument("username")
    create_user.add_argument("--operator", action="store_true", help="may see the operators' dashboard")
    create_user.add_argument(
        "--password-env", metavar="VAR", help="read the password from this environment variable"
    )

    local = sub.add_parser("local-model", help="install, check or serve the embedded local model")
    local_actions = local.add_subparsers(dest="action", required=True)
    install = local_actions.add_parser(
        "install", help="build (once, cached) and install the server and the model"
    )
    install.add_argument("--force", action="store_true", help="reinstall the server and the model file")
    local_actions.add_parser("status", help="what is installed and whether it can be served")
    local_serve = local_actions.add_parser("serve", help="run the model server in the foreground")
    local_serve.add_argument("--host", default="127.0.0.1")
    local_serve.add_argument("--port", type=int, default=8080)

    args = parser.parse_args(argv)
    settings = get_settings()
    if args.command in ("serve", "service", "local-model"):
        from backend.local_model.installer import InstallError
        from backend.local_model.model_file import ModelFileError
        from backend.local_model.supervisor import LocalModelError
        from backend.runtime_factory import RuntimeConfigurationError

        commands = {"serve": _serve, "service": _service, "local-model": _local_model}
        try:
            commands[args.command](args, settings)
        except (RuntimeConfigurationError, InstallError, ModelFileError, LocalModelError) as exc:
            raise SystemExit(f"error: {exc}") from None
    elif args.command == "migrate":
        _migrate(settings)
        print("database is at the latest schema")
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
