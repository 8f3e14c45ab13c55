# Parlor's commands. `make run` and `make test` are the two a new user needs.
SHELL := /bin/bash
.DEFAULT_GOAL := help
.PHONY: help run dev test unit e2e lint bench

help:
	@echo "make run    install what is missing, build a release, serve on http://127.0.0.1:3000"
	@echo "make test   install what is missing, run every test (unit, HTTP, browser)"
	@echo "make dev    cargo leptos watch: rebuild and reload on every change"
	@echo "make lint   rustfmt and clippy, as CI runs them"
	@echo "make bench  the performance benchmarks (RUNS=5 for medians): target/bench.json, a table (docs/performance.md)"

run:
	scripts/setup.sh
	cargo leptos build --release --precompress --split
	./target/release/parlor

dev:
	scripts/setup.sh
	cargo leptos watch --split

test: unit e2e

unit:
	scripts/setup.sh test
	cargo test
	python3 -m unittest discover -s scripts -p 'test_*.py'

e2e:
	scripts/setup.sh test
	rm -f target/site/pkg/*.br target/site/pkg/*.gz
	# The server and fake upstream as `cargo test` builds them (same features, no second
	# build of the server), then only the site (WASM, CSS, assets) through cargo-leptos.
	cargo build --bins --tests
	cargo leptos build --frontend-only --split
	cd end2end && npm test

lint:
	scripts/setup.sh
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy -p parlor-frontend --target wasm32-unknown-unknown -- -D warnings

RUNS ?= 1
bench:
	scripts/setup.sh test
	scripts/bench-all.sh $(RUNS)
