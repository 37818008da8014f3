#!/usr/bin/env bash
# revoke.sh ROOT ACCOUNT — keys, account and running processes gone (idempotent).
set -euo pipefail
root="$1" account="$2"
if [[ "${GPULOTS_REAL_ACCOUNTS:-0}" == 1 ]] && id "$account" >/dev/null 2>&1; then
    pkill -KILL -u "$account" || true
    userdel --remove "$account" || true
fi
rm -rf "${root:?}/home/$account" "$root/accounts/$account"
