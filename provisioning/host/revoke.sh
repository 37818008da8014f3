#!/usr/bin/env bash
# revoke.sh ROOT ACCOUNT — keys, account, processes and files gone (idempotent).
#
# With real accounts: no new login (keys gone, account locked and expired), then every
# process of the account killed until none is left (a zombie is dead already; a process that
# survives 20 s fails the step, which is retried and keeps the lot closed), then every file
# the account owns outside its home removed: ROOT/tmp, ROOT/var/tmp, ROOT/dev/shm, the
# filesystem of ROOT itself and those of the paths listed in ROOT/etc/gpulots/scratch (one a
# line, e.g. /data), then its card groups and its slice's device policy, then the account.
# Its user id is not handed out again (prepare_access.sh keeps the record).
set -euo pipefail
root="$1" account="$2"
base="${root%/}"  # "" for "/"
[[ -L "$root/home/$account/.ssh" ]] || rm -f "$root/home/$account/.ssh/authorized_keys"
if [[ "${GPULOTS_REAL_ACCOUNTS:-0}" == 1 ]] && uid=$(id -u "$account" 2>/dev/null); then
    [[ "$uid" -gt 0 ]] || { echo "refused: $account is uid $uid" >&2; exit 6; }
    usermod --lock --expiredate 1 "$account" >/dev/null 2>&1 || true
    if [[ -z "$base" && -d /run/systemd/system ]]; then  # its sessions and user manager
        loginctl terminate-user "$uid" >/dev/null 2>&1 || true
        systemctl kill --signal=KILL "user-$uid.slice" >/dev/null 2>&1 || true
    fi
    # by real and effective id: a set-user-id program the account started counts too
    living() { ps -o pid=,stat= -U "$uid" -u "$uid" 2>/dev/null | awk '$2 !~ /^Z/ { print $1 }'; }
    for _ in $(seq 200); do  # a process forking meanwhile is caught on the next round
        [[ -z "$(living)" ]] && break
        pkill -KILL -U "$uid" 2>/dev/null || true
        pkill -KILL -u "$uid" 2>/dev/null || true
        sleep 0.1
    done
    if [[ -n "$(living)" ]]; then
        echo "processes of $account (uid $uid) survive: $(living | tr '\n' ' ')" >&2
        exit 7
    fi
    places=("$base/" "$base/tmp" "$base/var/tmp" "$base/dev/shm" "$base/home")
    if [[ -f "$base/etc/gpulots/scratch" ]]; then
        while read -r place; do
            [[ "$place" == /* && "$place" != *..* ]] && places+=("$base$place")
        done < "$base/etc/gpulots/scratch"
    fi
    for place in "${places[@]}"; do
        [[ -d "$place" && ! -L "${place%/}" ]] || continue
        # -xdev: each filesystem once, never /proc or /sys; rm never follows a link
        find "$place" -xdev -uid "$uid" -prune -print0 2>/dev/null |
            xargs -0 -r rm -rf --one-file-system --
    done
    left=$(find "${places[@]}" -xdev -uid "$uid" -print -quit 2>/dev/null || true)
    if [[ -n "$left" ]]; then
        echo "files of $account (uid $uid) remain: $left" >&2
        exit 8
    fi
    usermod -G "" "$account"  # no card group any more
    rm -rf "$base/etc/systemd/system/user-$uid.slice.d"
    userdel "$account"
    if getent group "$account" >/dev/null; then groupdel "$account"; fi
fi
rm -rf "${root:?}/home/$account" "$root/accounts/$account"
