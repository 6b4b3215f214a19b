#!/usr/bin/env bash
# Makes sure the tools the scheduler recipes (docs/recipes) call are
# installed, so the e2e test that runs their commands can: curl (the API
# sensor), jq (reading the JSON line), flock (the cron line, util-linux) and
# python3 (their Python is compiled and run against stand-ins).
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

for pair in curl:curl jq:jq flock:util-linux python3:python3; do
  cmd=${pair%%:*} pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 && continue
  apt_install "$pkg" "$cmd, called by the recipes in docs/recipes"
  command -v "$cmd" >/dev/null 2>&1 || { echo "$pkg installed but $cmd not found" >&2; exit 1; }
done
