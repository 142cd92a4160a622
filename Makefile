# Developer entry points. `make demo` and `make test` are the README's two commands; both
# install what a fresh machine lacks first (uv from PyPI, bubblewrap from Debian, locked deps;
# `make test` also Debian's chromium for the console's browser test).
UV := python3 -m uv
# Test processes (pytest-xdist). Most tests wait on servers, sandboxes and sockets, so one per
# core leaves the cores idle half the time: two per core (on a 2-core VM without PostgreSQL,
# 5 min 19 s against 6 min 41 s). A file's tests stay in one process (module-scoped servers).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) * 2 )))

.PHONY: install browser demo test lint typecheck format bench all

install:
	@python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv
	@command -v bwrap >/dev/null 2>&1 || (command -v apt-get >/dev/null 2>&1 && \
		(apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
		 (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null))) || \
		echo "warning: bubblewrap (Debian package 'bubblewrap') is missing; sandbox tools will fail"
	$(UV) sync --frozen --quiet --compile-bytecode
	@# our own sources too: with PYTHONDONTWRITEBYTECODE set (as on CI machines) every test
	@# server would otherwise compile them again at start
	@$(UV) run --frozen python -m compileall -q src tests >/dev/null

# Only the tests need a browser (the console's); the demo does without the download.
browser:
	@(test -x /usr/bin/chromium && command -v chromedriver >/dev/null 2>&1) || \
		(command -v apt-get >/dev/null 2>&1 && \
		(apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || \
		 (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null))) || \
		echo "warning: chromium/chromium-driver (Debian) are missing; the console browser test will be skipped"

demo: install
	$(UV) run corral demo

test: install browser
	$(UV) run pytest -q -n $(TEST_WORKERS) --dist loadfile

lint:
	$(UV) run ruff check src tests bench
	$(UV) run ruff format --check src tests bench

typecheck:
	$(UV) run mypy

format:
	$(UV) run ruff format src tests bench
	$(UV) run ruff check --fix src tests bench

bench: install
	$(UV) run python bench/ttft.py
	$(UV) run python bench/ttft.py --compare-hands
	$(UV) run python bench/log.py
	$(UV) run python bench/streams.py
	$(UV) run python bench/provision.py
	$(UV) run python bench/scale.py
	$(UV) run python bench/brain.py
	$(UV) run python bench/chaos.py --sessions 200 --kills 1000

all: lint typecheck test

# The container image (deploy/Containerfile, docs/deploy.md). BASE=... picks another Debian 12
# base image; behind TLS inspection the CA bundle in SSL_CERT_FILE goes in as a build secret.
IMAGE ?= localhost/corral:latest
.PHONY: image
image:
	podman build $(if $(BASE),--build-arg BASE=$(BASE)) \
		$(if $(SSL_CERT_FILE),--secret id=ca$(comma)src=$(SSL_CERT_FILE)) \
		-f deploy/Containerfile -t $(IMAGE) .
comma := ,
