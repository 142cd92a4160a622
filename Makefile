# Developer entry points. `make demo` and `make test` are the README's two commands; both
# install what a fresh machine lacks first (uv from PyPI, bubblewrap from Debian, locked deps;
# `make test` also Debian's chromium for the console's browser test).

# uv: the one on PATH, else python3's module, else a private copy in a bootstrap venv. Never
# `pip install` into python3 itself: Debian's is externally managed (PEP 668) and refuses.
# Override with `make UV=/path/to/uv ...` (or UV in the environment, which `uv run` sets).
UV_BOOTSTRAP ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/corral/uv-bootstrap
ifndef UV
UV := $(shell if uv --version >/dev/null 2>&1; then echo uv; \
	elif python3 -m uv --version >/dev/null 2>&1; then echo python3 -m uv; \
	else echo '$(UV_BOOTSTRAP)/bin/uv'; fi)
endif
# $(call apt_install,PACKAGES): Debian packages, refreshing the package lists only if needed.
apt_install = command -v apt-get >/dev/null 2>&1 && \
	(apt-get install -y -qq $(1) >/dev/null 2>&1 || \
	 (apt-get update -qq && apt-get install -y -qq $(1) >/dev/null))
# Test processes (pytest-xdist). Most tests wait on servers, sandboxes and sockets, so one per
# core leaves the cores idle half the time: two per core (on a 2-core VM without PostgreSQL,
# 5 min 19 s against 6 min 41 s). A file's tests stay in one process (module-scoped servers).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) * 2 )))

.PHONY: uv install browser demo dist test lint typecheck format bench all

# The bootstrap venv needs Debian's python3-venv (ensurepip); pip in it gets the CA bundle the
# environment names, as uv itself reads SSL_CERT_FILE.
uv:
	@test "$(UV)" != '$(UV_BOOTSTRAP)/bin/uv' || '$(UV_BOOTSTRAP)/bin/uv' --version >/dev/null 2>&1 || { \
		echo "uv is neither on PATH nor a python3 module: installing it into $(UV_BOOTSTRAP)"; \
		rm -rf '$(UV_BOOTSTRAP)'; \
		python3 -m venv '$(UV_BOOTSTRAP)' >/dev/null 2>&1 || { rm -rf '$(UV_BOOTSTRAP)' && \
			{ $(call apt_install,python3-venv); } && python3 -m venv '$(UV_BOOTSTRAP)'; } || { \
			echo "error: cannot make a venv for uv; install uv (https://docs.astral.sh/uv/) or Debian's python3-venv" >&2; \
			exit 2; }; \
		if [ -z "$${PIP_CERT:-}" ] && [ -n "$${SSL_CERT_FILE:-}" ]; then export PIP_CERT="$$SSL_CERT_FILE"; fi; \
		'$(UV_BOOTSTRAP)/bin/python' -m pip install --quiet --disable-pip-version-check uv; }

install: uv
	@command -v bwrap >/dev/null 2>&1 || { $(call apt_install,bubblewrap); } || \
		echo "warning: bubblewrap (Debian package 'bubblewrap') is missing; sandbox tools will fail"
	$(UV) sync --frozen --quiet --compile-bytecode
	@# our own sources too: with PYTHONDONTWRITEBYTECODE set (as on CI machines) every test
	@# server would otherwise compile them again at start
	@$(UV) run --frozen python -m compileall -q src tests >/dev/null

# Only the tests need a browser (the console's); the demo does without the download.
browser:
	@(test -x /usr/bin/chromium && command -v chromedriver >/dev/null 2>&1) || \
		{ $(call apt_install,chromium chromium-driver); } || \
		echo "warning: chromium/chromium-driver (Debian) are missing; the console browser test will be skipped"

demo: install
	$(UV) run corral demo

# The wheel and sdist `pipx install` / `pip install` take (dist/corral-*.whl).
DIST_DIR ?= dist
dist: uv
	$(UV) build --quiet --out-dir '$(DIST_DIR)'

# PYTEST_ARGS narrows or extends the run, e.g. `make test PYTEST_ARGS=tests/console`.
test: install browser
	CORRAL_TEST_UV='$(UV)' $(UV) run pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

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
