#!/usr/bin/env bash
# Makes sure Debian's pgbouncer is installed, for the pooler tests
# (testkit/pgtest starts its own pgbouncer, as the postgres user, on a port
# of its own, in front of its throwaway cluster).
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

[[ -x /usr/sbin/pgbouncer ]] && exit 0
apt_install pgbouncer pgbouncer
[[ -x /usr/sbin/pgbouncer ]] || { echo "pgbouncer installed but /usr/sbin/pgbouncer is missing" >&2; exit 1; }
# The package may start a pgbouncer of its own on 6432; idem never uses it.
# Without systemd (a container) there may be nothing to stop: never fail here.
if command -v service >/dev/null 2>&1; then
  service pgbouncer stop >/dev/null 2>&1 || true
fi
if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
  systemctl disable --now pgbouncer >/dev/null 2>&1 || true
fi
