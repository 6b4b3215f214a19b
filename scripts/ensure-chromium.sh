#!/usr/bin/env bash
# Makes sure Debian's chromium is installed, for the status page's browser
# tests (driven from Go over the DevTools protocol). It starts nothing.
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

for b in chromium chromium-browser; do
  command -v "$b" >/dev/null 2>&1 && exit 0
done
apt_install chromium chromium
command -v chromium >/dev/null 2>&1 || { echo "chromium installed but not found on PATH" >&2; exit 1; }
