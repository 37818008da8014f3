#!/usr/bin/env bash
# assign_cards.sh ROOT ACCOUNT CARDS — the cards the account sees, e.g. "0,1" (one job on
# both) or "1" (one of two independent experiments); both CUDA and ROCm names (idempotent).
set -euo pipefail
root="$1" account="$2" cards="$3"
[[ "$cards" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "bad card list: $cards" >&2; exit 2; }
for name in .gpulots-env .profile .bashrc; do  # root never writes through a planted link
    if [[ -L "$root/home/$account/$name" ]]; then echo "refused: $name is a link" >&2; exit 4; fi
done
# Host indices in PCI bus order (as nvidia-smi numbers them); a host-wide ROCR list would
# re-index HIP's, so the account's shell drops it.
printf 'export CUDA_DEVICE_ORDER=PCI_BUS_ID\nexport CUDA_VISIBLE_DEVICES=%s\nexport HIP_VISIBLE_DEVICES=%s\nunset ROCR_VISIBLE_DEVICES\n' \
    "$cards" "$cards" > "$root/home/$account/.gpulots-env"
for profile in .profile .bashrc; do  # every login shell sees its cards (once)
    file="$root/home/$account/$profile"
    grep -qs '^\. ~/.gpulots-env$' "$file" || printf '. ~/.gpulots-env\n' >> "$file"
done
