"""The `chat-shell` console script: serve, migrate, service, create-user."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys

from backend.logs import configure_logging
from backend.settings import Settings, get_settings


def _migrate(settings: Settings) -> None:
    from alembic import command

    from backend.db import alembic_config

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(settings.resolved_database_url), "head")


def _serve(args: argparse.Namespace, settings: Settings) -> None:
    import uvicorn

    from backend.app import create_app

    if args.migrate:
        _migrate(settings)
    configure_logging(settings.log_level, json_lines=settings.log_json)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_config=None)


def _service(args: argparse.Namespace, settings: Settings) -> None:
    import uvicorn

    from backend.runtime_factory import create_service_app

    configure_logging(settings.log_level, json_lines=settings.log_json)
    uvicorn.run(create_service_app(settings), host=args.host, port=args.port, log_config=None)


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

    args = parser.parse_args(argv)
    settings = get_settings()
    if args.command in ("serve", "service"):
        from backend.runtime_factory import RuntimeConfigurationError

        try:
            (_serve if args.command == "serve" else _service)(args, settings)
        except RuntimeConfigurationError as exc:
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
