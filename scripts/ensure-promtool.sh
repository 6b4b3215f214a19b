#!/usr/bin/env bash
# Makes sure Debian's prometheus package is installed: promtool tests the
# alert rules in deploy/prometheus, and the e2e tests start the prometheus
# server themselves (on 127.0.0.1, a port and a data directory of their own)
# to scrape a real idem serve. The script starts nothing; the package's own
# service is never used.
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 && exit 0
apt_install prometheus "promtool and the prometheus server"
for c in promtool prometheus; do
  command -v "$c" >/dev/null 2>&1 || { echo "prometheus installed but $c not found" >&2; exit 1; }
done
