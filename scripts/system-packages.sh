#!/usr/bin/env bash
# Debian packages the test suite needs beside Python's: headless Chromium for the browser
# tests (Playwright drives Debian's build; its own browser download does not work here)
# gettext for the translation checks, and OpenSSH's server for the SSH backend's tests (a
# real sshd on loopback, with its own host key), and DejaVu Sans for the receipt PDFs.
# Installs only what is missing.
set -euo pipefail

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v msgfmt >/dev/null || missing+=(gettext)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh-keygen >/dev/null || missing+=(openssh-client)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
((${#missing[@]})) || exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "missing system packages: ${missing[*]} (install them with apt-get as root)" >&2
    exit 1
fi
echo "installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
