#!/bin/sh
# The README's first command: install this checkout into its own virtual environment and
# serve the demo (HTTP on 127.0.0.1:8080; arguments are passed to `wasmgate serve --demo`).
# Run again on a newer checkout, it upgrades that environment in place (the version comes
# from git: `wasmgate --version`); `--install-only` as the first argument stops there.
#
# Never the system Python's site-packages (PEP 668: Debian 12, Ubuntu 23.04+, Raspberry Pi
# OS refuse it). Debian and Ubuntu ship venv's pip bootstrap in a separate package
# (python3.11-venv on Debian 12), missing on a fresh install: when making the environment
# fails it is installed with apt-get, as root or through sudo, or the one command that does
# it is printed.
#
#   WASMGATE_VENV   where the environment goes (default ~/.local/share/wasmgate-venv)
#   WASMGATE_DATA   the demo's key, trust file, bundles and caches (default
#                   ~/.local/share/wasmgate-quickstart, for root too: never the Debian
#                   package's /var/lib/wasmgate, which `apt purge wasmgate` deletes)
#   PYTHON          the interpreter (default python3; 3.10 to 3.13)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${WASMGATE_VENV:-$HOME/.local/share/wasmgate-venv}
py=${PYTHON:-python3}
# The daemon's own variable, when set, wins: the caller chose the place.
data=${WASMGATE_DATA:-${WASMGATE_PATHS__DATA_DIR:-$HOME/.local/share/wasmgate-quickstart}}
install_only=false
if [ "${1:-}" = --install-only ]; then install_only=true; shift; fi

if ! command -v "$py" >/dev/null 2>&1; then
  echo "quickstart: no $py: install Python 3.10 to 3.13 (Debian: apt-get install python3)" >&2
  exit 2
fi
if ! "$py" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 13))'; then
  echo "quickstart: $("$py" -V 2>&1) is not supported: use Python 3.10 to 3.13 (PYTHON=...)" >&2
  exit 2
fi
venv_package() {
  # Debian's name for the interpreter's venv support (python3.11-venv on Debian 12).
  pkg="python$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
  if [ "$(id -u)" = 0 ]; then
    as_root=""
  elif command -v sudo >/dev/null 2>&1; then
    as_root="sudo"
  else
    echo "quickstart: $py cannot make a virtual environment: as root, run apt-get install $pkg" >&2
    exit 2
  fi
  echo "quickstart: installing $pkg (venv's pip bootstrap) with apt-get" >&2
  $as_root apt-get update -qq
  $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
}
if [ ! -x "$venv/bin/pip" ]; then
  # A failed attempt leaves a venv without pip behind: made again once the package is in.
  if ! "$py" -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    command -v apt-get >/dev/null 2>&1 || {
      echo "quickstart: '$py -m venv' failed: install your distribution's venv support" >&2
      exit 2
    }
    venv_package
    "$py" -m venv "$venv"
  fi
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$here"
if $install_only; then
  "$venv/bin/wasmgate" --version
  exit 0
fi
export WASMGATE_PATHS__DATA_DIR="$data"
exec "$venv/bin/wasmgate" serve --demo "$@"
