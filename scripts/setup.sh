#!/usr/bin/env bash
# Installs what Parlor needs to build (and, with `test`, to test), skipping anything already
# installed at the right version. Only crates.io, npm and Debian packages are used.
#
#   scripts/setup.sh         build tools: wasm target, cargo-leptos, wasm-bindgen CLI, wasm-opt
#   scripts/setup.sh test    the above, plus Chromium and the browser tests' npm packages
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_LEPTOS_VERSION=0.3.10
BINARYEN_VERSION=132
# wasm-bindgen's CLI must match the library version in Cargo.lock exactly.
WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)

say() { printf '\033[1;34m[setup]\033[0m %s\n' "$*"; }

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  say "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

if [ "$(cargo leptos --version 2>/dev/null || true)" != "cargo-leptos $CARGO_LEPTOS_VERSION" ]; then
  say "installing cargo-leptos $CARGO_LEPTOS_VERSION (a long build, about 30 minutes on 2 cores)"
  cargo install cargo-leptos --version "$CARGO_LEPTOS_VERSION" --locked --features no_downloads
fi

if [ "$(wasm-bindgen --version 2>/dev/null || true)" != "wasm-bindgen $WASM_BINDGEN_VERSION" ]; then
  say "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (about 10 minutes)"
  # Not --locked: its published Cargo.lock pins a webpki-roots release (1.0.11) that the
  # registry mirror here does not carry; the resolved dependencies build and work.
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --force
fi

if ! wasm-opt --version 2>/dev/null | grep -q "version $BINARYEN_VERSION"; then
  say "installing wasm-opt (npm binaryen@$BINARYEN_VERSION) for release builds"
  npm install --global --no-audit --no-fund "binaryen@$BINARYEN_VERSION"
fi

apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
  fi
}

MCP_SERVER_TIME_VERSION=2026.10.19
if [ "${1:-}" = "test" ]; then
  apt_install chromium redis-server
  if [ ! -d end2end/node_modules/playwright-core ] || ! (cd end2end && npm ls --silent >/dev/null 2>&1); then
    say "installing the browser tests' npm packages"
    (cd end2end && npm ci --no-audit --no-fund)
  fi
  # The tool tests' stdio MCP server, written by others: PyPI mcp-server-time, in the
  # project's own virtual environment (.tools/venv), pinned.
  if ! .tools/venv/bin/python -c "import mcp_server_time" >/dev/null 2>&1; then
    command -v python3 >/dev/null || apt_install python3
    python3 -m venv --help >/dev/null 2>&1 && python3 -c "import ensurepip" >/dev/null 2>&1 \
      || apt_install python3-venv
    say "installing mcp-server-time $MCP_SERVER_TIME_VERSION into .tools/venv"
    rm -rf .tools/venv
    python3 -m venv .tools/venv
    .tools/venv/bin/pip install --quiet --disable-pip-version-check \
      "mcp-server-time==$MCP_SERVER_TIME_VERSION"
  fi
fi
say "ready"
