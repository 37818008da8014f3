#!/usr/bin/env bash
# install_keys.sh ROOT ACCOUNT KEYS_FILE — the researcher's public keys, replacing any
# earlier set (idempotent: a retry leaves one set, not two).
set -euo pipefail
root="$1" account="$2" keys="$3"
if grep -q "PRIVATE KEY" "$keys"; then echo "refused: a private key" >&2; exit 3; fi
for path in "$root/home/$account/.ssh" "$root/home/$account/.ssh/authorized_keys"; do
    # root never writes through a link the account may have planted
    if [[ -L "$path" ]]; then echo "refused: $path is a symbolic link" >&2; exit 4; fi
done
install -m 600 "$keys" "$root/home/$account/.ssh/authorized_keys"
if [[ "${GPULOTS_REAL_ACCOUNTS:-0}" == 1 ]]; then  # sshd reads them as the account
    chown -R "$account:" "$root/home/$account/.ssh"
fi
