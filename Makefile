# Developer entry points. `make demo` and `make test` are the README's two commands.
UV ?= $(shell command -v uv 2>/dev/null || echo "$(HOME)/.local/bin/uv")
export PATH := $(HOME)/.local/bin:$(PATH)

.PHONY: install demo test lint typecheck format bench all

install:
	@command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet --user uv || python3 -m pip install --quiet uv
	@command -v bwrap >/dev/null 2>&1 || (command -v apt-get >/dev/null 2>&1 && \
		(apt-get install -y -qq bubblewrap >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq bubblewrap))) || \
		echo "warning: bubblewrap (Debian package 'bubblewrap') is not installed; sandbox tools will report an error"
	uv sync --frozen

demo: install
	uv run corral demo

test: install
	uv run pytest -q

lint:
	uv run ruff check src tests bench
	uv run ruff format --check src tests bench

typecheck:
	uv run mypy

format:
	uv run ruff format src tests bench
	uv run ruff check --fix src tests bench

bench: install
	uv run python bench/ttft.py
	uv run python bench/log.py
	uv run python bench/streams.py

all: lint typecheck test
