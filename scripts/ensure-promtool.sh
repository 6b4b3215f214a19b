#!/usr/bin/env bash
# Makes sure promtool is installed (from Debian's prometheus package), so
# `make test` can test the alert rules in deploy/prometheus. It starts
# nothing: the package's own server is never used.
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

command -v promtool >/dev/null 2>&1 && exit 0
apt_install prometheus promtool
command -v promtool >/dev/null 2>&1 || { echo "prometheus installed but promtool not found" >&2; exit 1; }
