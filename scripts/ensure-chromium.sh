#!/usr/bin/env bash
# Makes sure Debian's chromium is installed, for the status page's browser
# tests (driven from Go over the DevTools protocol). It starts nothing.
set -euo pipefail

for b in chromium chromium-browser; do
  command -v "$b" >/dev/null 2>&1 && exit 0
done
if [[ $(id -u) -ne 0 ]]; then
  echo "chromium is not installed and we are not root: run 'sudo apt-get install -y chromium'" >&2
  exit 1
fi
echo "installing chromium (Debian package)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null 2>&1 || { echo "chromium installed but not found on PATH" >&2; exit 1; }
