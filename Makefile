# The two commands of the README: `make run` and `make test`.
.PHONY: setup run test test-deep bench lint migrate

setup:
	bash scripts/setup.sh

run: setup
	bash scripts/run.sh

test:
	bash scripts/test.sh

test-deep:
	CHAT_SHELL_DEEP=1 bash scripts/test.sh

bench:
	bash scripts/setup.sh test,bench
	.venv/bin/python -m bench

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

migrate: setup
	.venv/bin/chat-shell migrate
