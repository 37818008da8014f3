#!/usr/bin/env bash
# Debian packages the test suite needs beside Python's: headless Chromium for the browser
# tests (Playwright drives Debian's build; its own browser download does not work here)
# and gettext for the translation checks. Installs only what is missing.
set -euo pipefail

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v msgfmt >/dev/null || missing+=(gettext)
((${#missing[@]})) || exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "missing system packages: ${missing[*]} (install them with apt-get as root)" >&2
    exit 1
fi
echo "installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
