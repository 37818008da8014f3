#!/usr/bin/env bash
# assign_cards.sh ROOT ACCOUNT CARDS — the cards the account sees, e.g. "0,1" (one job on
# both) or "1" (one of two independent experiments); both CUDA and ROCm names (idempotent).
set -euo pipefail
root="$1" account="$2" cards="$3"
[[ "$cards" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "bad card list: $cards" >&2; exit 2; }
for name in .gpulots-env .profile .bashrc; do  # root never writes through a planted link
    if [[ -L "$root/home/$account/$name" ]]; then echo "refused: $name is a link" >&2; exit 4; fi
done
printf 'export CUDA_VISIBLE_DEVICES=%s\nexport HIP_VISIBLE_DEVICES=%s\n' "$cards" "$cards" \
    > "$root/home/$account/.gpulots-env"
for profile in .profile .bashrc; do  # every login shell sees its cards (once)
    file="$root/home/$account/$profile"
    grep -qs '^\. ~/.gpulots-env$' "$file" || printf '. ~/.gpulots-env\n' >> "$file"
done
