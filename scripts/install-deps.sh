#!/usr/bin/env bash
# Installs the named Debian packages that are missing (apt-get as root, or
# through sudo as a user). Used by scripts/demo.sh and scripts/test.sh.
set -euo pipefail
command -v apt-get >/dev/null 2>&1 || exit 0
missing=()
for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
((${#missing[@]})) || exit 0
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
