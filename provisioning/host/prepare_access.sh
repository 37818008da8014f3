#!/usr/bin/env bash
# prepare_access.sh ROOT ACCOUNT — the order's account on the host (idempotent).
# Under the local backend ROOT is a sandbox folder; on a real host it is "/" and the account
# is a system user (useradd runs only there, when GPULOTS_REAL_ACCOUNTS=1), its home
# ROOT/home/ACCOUNT, its password "*" (login by key only; sshd refuses a locked "!" account
# when it runs without PAM).
#
# User ids are never reused: a freed id may still own files somewhere (a data disk, a
# mount revoke.sh did not know), which the next account would inherit. Each id handed out is
# recorded in ROOT/var/lib/gpulots/issued-uids; the next is above every id recorded or in use
# (from 70000; seed the record with a higher id to start elsewhere), and an id still owning
# a file in the places revoke.sh cleans is skipped. The account's group has the same id.
set -euo pipefail
root="$1" account="$2"
[[ "$account" =~ ^gl-[a-z0-9-]{1,40}$ ]] || { echo "bad account name: $account" >&2; exit 2; }
base="${root%/}"  # "" for "/"
FIRST_UID=70000

owns_files() {  # whether id $1 owns a file where tenants leave them (one filesystem each)
    local place
    for place in "$base/tmp" "$base/var/tmp" "$base/dev/shm" "$base/home"; do
        [[ -d "$place" ]] || continue
        [[ -n "$(find "$place" -xdev \( -uid "$1" -o -gid "$1" \) -print -quit 2>/dev/null)" ]] && return 0
    done
    return 1
}

if [[ "${GPULOTS_REAL_ACCOUNTS:-0}" == 1 ]] && ! id "$account" >/dev/null 2>&1; then
    record="$base/var/lib/gpulots/issued-uids"
    mkdir -p "${record%/*}" "$base/home"
    exec 9>>"$record.lock"
    flock 9  # two lots' jobs preparing accounts at once take different ids
    touch "$record"
    uid=$(
        { cat "$record"; getent passwd | cut -d: -f3; echo $((FIRST_UID - 1)); } |
            awk -v first="$FIRST_UID" '$1 ~ /^[0-9]+$/ && $1 + 0 >= first - 1 && $1 + 0 < 4000000000 {
                if ($1 + 0 > top) top = $1 + 0 } END { print top + 1 }'
    )
    while getent passwd "$uid" >/dev/null || getent group "$uid" >/dev/null || owns_files "$uid"; do
        uid=$((uid + 1))
    done
    printf '%s %s\n' "$uid" "$account" >> "$record"  # before useradd: never handed out twice
    if getent group "$account" >/dev/null; then  # left by a run that failed at useradd
        groupdel "$account"
    fi
    groupadd --gid "$uid" "$account"
    useradd --uid "$uid" --gid "$uid" --home-dir "$base/home/$account" --create-home \
        --shell /bin/bash --password '*' "$account"
    flock -u 9
fi
mkdir -p "$root/home/$account/.ssh" "$root/accounts"
chmod 700 "$root/home/$account/.ssh"
touch "$root/accounts/$account"
