#!/usr/bin/env bash
# prepare_environment.sh ROOT ACCOUNT ENVIRONMENT — record (here) or activate (on a host)
# the chosen environment for the account (idempotent).
set -euo pipefail
root="$1" account="$2" environment="$3"
if [[ -L "$root/home/$account/ENVIRONMENT" ]]; then echo "refused: ENVIRONMENT is a link" >&2; exit 4; fi
printf '%s\n' "$environment" > "$root/home/$account/ENVIRONMENT"
