#!/usr/bin/env bash
# Prints a new directory for make test's temporary files: the test clusters'
# data directories, the JetStream stores, go test's build directory. On
# /dev/shm when it is a tmpfs with 4 GiB free (the throwaway clusters run
# with fsync off already: on a disk their writes still cost the kernel's
# writeback and block layer a sixth of the run's CPU), under $TMPDIR (or
# /tmp) otherwise. Open to every user as /tmp is (the clusters run as
# postgres). The caller removes it.
set -euo pipefail
base="${TMPDIR:-/tmp}"
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] &&
	[ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -ge $((4 * 1024 * 1024)) ]; then
	base=/dev/shm
fi
dir=$(mktemp -d "$base/idem-test.XXXXXX")
chmod 1777 "$dir"
echo "$dir"
