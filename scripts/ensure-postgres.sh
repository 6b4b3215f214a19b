#!/usr/bin/env bash
# Makes sure PostgreSQL 15+ server binaries are installed (Debian package), so
# tests, benchmarks and `idem dev` can start a throwaway cluster. It starts
# nothing: internal/localpg does, as the postgres user when we run as root.
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

have_server() {
  for d in /usr/lib/postgresql/*/bin; do
    v=$(basename "$(dirname "$d")")
    [[ "$v" =~ ^[0-9]+$ ]] && (( v >= 15 )) && [[ -x "$d/initdb" ]] && return 0
  done
  return 1
}

if have_server && id postgres >/dev/null 2>&1; then
  exit 0
fi
apt_install postgresql "PostgreSQL 15+"
# The package starts a cluster of its own on 5432; idem never uses it.
have_server || { echo "postgresql installed but no server binaries found" >&2; exit 1; }
