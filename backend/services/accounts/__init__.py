"""Accounts: users and their credentials (passwords, browser sessions, API tokens, invite codes)
in `auth`, and what operators do to accounts, each action written to the audit log, in `admin`."""
