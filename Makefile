# The two commands of the README: `make run` and `make test`.
.PHONY: setup run test test-deep bench lint migrate env

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
	bash scripts/services.sh
	command -v valgrind >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind)
	.venv/bin/python -m bench

lint:
	bash scripts/lint.sh

migrate: setup
	.venv/bin/chat-shell migrate

# A .env with fresh random secrets for `docker compose up` (docs/deployment.md "Secrets"); `make run` needs none.
env:
	python3 -m backend.secret_policy
