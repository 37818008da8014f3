#!/usr/bin/env bash
# prepare_access.sh ROOT ACCOUNT — the order's account on the host (idempotent).
# Under the local backend ROOT is a sandbox folder; on a real host it is "/" and the account
# is a system user (useradd runs only there, when GPULOTS_REAL_ACCOUNTS=1).
set -euo pipefail
root="$1" account="$2"
[[ "$account" =~ ^gl-[a-z0-9-]{1,40}$ ]] || { echo "bad account name: $account" >&2; exit 2; }
if [[ "${GPULOTS_REAL_ACCOUNTS:-0}" == 1 ]] && ! id "$account" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash "$account"
fi
mkdir -p "$root/home/$account/.ssh" "$root/accounts"
chmod 700 "$root/home/$account/.ssh"
touch "$root/accounts/$account"
