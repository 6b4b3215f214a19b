#!/usr/bin/env bash
# apt-install.sh PACKAGE WHY: installs a Debian package for the project's own
# scripts (ensure-*.sh source it), as root, or says how when we are not root.
set -euo pipefail

apt_install() {
  local pkg=$1 why=$2
  if [[ $(id -u) -ne 0 ]]; then
    echo "$why is not installed and we are not root: run 'sudo apt-get install -y $pkg'" >&2
    exit 1
  fi
  echo "installing $why (Debian package $pkg)..." >&2
  export DEBIAN_FRONTEND=noninteractive
  # Another apt (an unattended upgrade, a second install) may hold dpkg's
  # lock for a while: wait for it rather than fail.
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "$pkg" >/dev/null
}
