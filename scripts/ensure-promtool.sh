#!/usr/bin/env bash
# Makes sure promtool is installed (from Debian's prometheus package), so
# `make test` can test the alert rules in deploy/prometheus. It starts
# nothing: the package's own server is never used.
set -euo pipefail

command -v promtool >/dev/null 2>&1 && exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "promtool is not installed and we are not root: run 'sudo apt-get install -y prometheus'" >&2
  exit 1
fi
echo "installing promtool (Debian package prometheus)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v promtool >/dev/null 2>&1 || { echo "prometheus installed but promtool not found" >&2; exit 1; }
