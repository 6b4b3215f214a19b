#!/usr/bin/env bash
# Builds the versitygw S3 server the object-store tests run (testkit/s3test)
# into the cache folder those tests look in, when it is not there yet, so
# that make test builds it beside go vet instead of inside the first test
# that needs it. The version is testkit/s3test's; the same file lock keeps
# a test binary from building it at the same time. It starts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^[[:space:]]*Version = "\(v[^"]*\)"$/\1/p' testkit/s3test/s3test.go)
module=$(sed -n 's/^[[:space:]]*Module  *= "\([^"]*\)"$/\1/p' testkit/s3test/s3test.go)
[ -n "$version" ] && [ -n "$module" ] || { echo "ensure-versitygw: no Version or Module in testkit/s3test/s3test.go" >&2; exit 1; }
[ -z "${IDEM_VERSITYGW:-}" ] || exit 0
dir="${XDG_CACHE_HOME:-$HOME/.cache}/idem-tools/versitygw-$version"
[ -x "$dir/bin/versitygw" ] && exit 0
mkdir -p "$dir/bin"
exec 9>"$dir/build.lock"
flock 9
[ -x "$dir/bin/versitygw" ] && exit 0
echo "building versitygw $version (once, into $dir)..."
tmp=$(mktemp -d "$dir/build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && GOBIN="$tmp" GOFLAGS= GOWORK=off go install "$module@$version")
mv "$tmp/versitygw" "$dir/bin/versitygw"
