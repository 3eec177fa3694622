"""usernames unique regardless of case

"Alice" and "alice" were two accounts. Existing look-alikes keep their accounts: the oldest
(lowest id) keeps its name, each later one is renamed to `<name>-<id>` (shortened to fit 64
characters, and given a further `-<n>` should even that be taken). Then a unique index on
`lower(username)` keeps it so.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 23:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"

INDEX = "uq_users_username_lower"
MAX_LENGTH = 64


def _renamed(username: str, user_id: int, taken: set[str]) -> str:
    suffix = f"-{user_id}"
    attempt = 0
    while True:
        candidate = username[: MAX_LENGTH - len(suffix)] + suffix
        if candidate.lower() not in taken:
            return candidate
        attempt += 1
        suffix = f"-{user_id}-{attempt}"


def renames(users: Sequence[tuple[int, str]]) -> dict[int, str]:
    """The new name of each later look-alike, by id; `users` are (id, username) pairs."""
    taken = {name.lower() for _, name in users}
    seen: set[str] = set()
    changes: dict[int, str] = {}
    for user_id, name in sorted(users):
        if name.lower() not in seen:
            seen.add(name.lower())
            continue
        new = _renamed(name, user_id, taken)
        taken.add(new.lower())
        seen.add(new.lower())
        changes[user_id] = new
    return changes


def upgrade() -> None:
    users = sa.table("users", sa.column("id", sa.BigInteger), sa.column("username", sa.String))
    connection = op.get_bind()
    rows = [(row.id, row.username) for row in connection.execute(sa.select(users.c.id, users.c.username))]
    for user_id, name in renames(rows).items():
        connection.execute(sa.update(users).where(users.c.id == user_id).values(username=name))
    op.create_index(INDEX, "users", [sa.text("lower(username)")], unique=True)


def downgrade() -> None:
    op.drop_index(INDEX, table_name="users")
