#!/usr/bin/env bash
# assign_cards.sh ROOT ACCOUNT CARDS — the cards the account may use, e.g. "0,1" (one job on
# both) or "1" (one of two independent experiments), host indices in PCI bus order
# (idempotent).
#
# The visible-device variables only number the cards for CUDA and ROCm; anyone can unset
# them. What keeps the account off every other card is the cards' device files: with real
# accounts (GPULOTS_REAL_ACCOUNTS=1) each card's files belong to root and the group
# gpulots-card<N>, mode 0660, every card of the host at every run, and the account is a
# member of its own cards' groups and of no other. The shared control nodes (/dev/nvidiactl,
# /dev/nvidia-uvm*, /dev/nvidia-modeset, /dev/kfd) stay open: without a card's own file they
# reach no card. Where systemd runs, the account's slice (user-UID.slice) also gets a device
# policy allowing only those files and the shared nodes (best effort: effective from its next
# login; the file groups are what holds).
#
# Card index -> device files: ROOT/etc/gpulots/cards when present, one line per card,
# "<index> <file> [<file>...]", files under /dev, e.g. "0 /dev/nvidia0" or
# "0 /dev/dri/card1 /dev/dri/renderD128" (a BMC's display took card0); otherwise by the
# drivers' numbering: NVIDIA /dev/nvidia<N>, AMD /dev/dri/card<N> and /dev/dri/renderD<128+N>,
# which holds where the minor numbers follow PCI bus order (README: how to check).
set -euo pipefail
root="$1" account="$2" cards="$3"
[[ "$cards" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "bad card list: $cards" >&2; exit 2; }
for name in .gpulots-env .profile .bashrc; do  # root never writes through a planted link
    if [[ -L "$root/home/$account/$name" ]]; then echo "refused: $name is a link" >&2; exit 4; fi
done
# Host indices in PCI bus order (as nvidia-smi numbers them); a host-wide ROCR list would
# re-index HIP's, so the account's shell drops it.
# ~/.gpulots/bin holds the split-test command (install_tool.sh).
{
    printf 'export CUDA_DEVICE_ORDER=PCI_BUS_ID\nexport CUDA_VISIBLE_DEVICES=%s\nexport HIP_VISIBLE_DEVICES=%s\nunset ROCR_VISIBLE_DEVICES\n' \
        "$cards" "$cards"
    printf '%s\n' 'case ":$PATH:" in *":$HOME/.gpulots/bin:"*) ;; *) export PATH="$HOME/.gpulots/bin:$PATH" ;; esac'
} > "$root/home/$account/.gpulots-env"
for profile in .profile .bashrc; do  # every login shell sees its cards (once)
    file="$root/home/$account/$profile"
    grep -qs '^\. ~/.gpulots-env$' "$file" || printf '. ~/.gpulots-env\n' >> "$file"
done

[[ "${GPULOTS_REAL_ACCOUNTS:-0}" == 1 ]] || exit 0  # a sandbox without system accounts
base="${root%/}"  # "" for "/"
uid=$(id -u "$account")

card_files() {  # "<index> </dev/...>" for every per-card device file of the host
    local map="$base/etc/gpulots/cards" index rest path name
    if [[ -f "$map" ]]; then
        while read -r index rest; do
            [[ "$index" =~ ^[0-9]+$ ]] || continue  # a comment, a blank line
            for path in $rest; do
                if [[ ! "$path" =~ ^/dev/[A-Za-z0-9/_.-]+$ || "$path" == *..* ]]; then
                    echo "$map: $path is not a device file under /dev" >&2
                    exit 5
                fi
                printf '%s %s\n' "$index" "$path"
            done
        done < "$map"
        return
    fi
    for path in "$base"/dev/nvidia[0-9]* "$base"/dev/dri/card[0-9]* "$base"/dev/dri/renderD[0-9]*; do
        [[ -e "$path" ]] || continue
        name="${path##*/}"
        case "$name" in
            nvidia*) index="${name#nvidia}" ;;
            card*) index="${name#card}" ;;
            *) index=$((${name#renderD} - 128)) ;;
        esac
        [[ "$index" =~ ^[0-9]+$ ]] && printf '%s %s\n' "$index" "${path#"$base"}"
    done
    return 0
}

params="$base/proc/driver/nvidia/params"
if [[ -f "$params" ]] && grep -q '^ModifyDeviceFiles: 1' "$params"; then
    echo "the NVIDIA driver re-creates its device files 0666 at each CUDA start" \
        "(ModifyDeviceFiles: 1): set 'options nvidia NVreg_ModifyDeviceFiles=0' (README)" >&2
    exit 5
fi
listed=$(card_files)
declare -A own=() found=()
for card in ${cards//,/ }; do own[$card]=1; done
allowed=()
while read -r index path; do
    [[ -n "$index" ]] || continue
    file="$base$path"
    if [[ -L "$file" || ! -e "$file" ]]; then
        echo "card $index: $path is missing or a link (name the node itself)" >&2
        exit 5
    fi
    group="gpulots-card$index"
    getent group "$group" >/dev/null || groupadd --system "$group" 2>/dev/null ||
        getent group "$group" >/dev/null  # another job's run made it meanwhile
    chown "root:$group" "$file"
    chmod 0660 "$file"
    if [[ -n "${own[$index]:-}" ]]; then
        found[$index]=1
        allowed+=("$path")
    fi
done <<< "$listed"
for card in ${cards//,/ }; do
    if [[ -z "${found[$card]:-}" ]]; then
        echo "card $card: no device file (/dev/nvidia$card, /dev/dri/renderD$((128 + card)));" \
            "list the host's cards in /etc/gpulots/cards" >&2
        exit 5
    fi
done
member_of=""
for card in ${cards//,/ }; do member_of+="${member_of:+,}gpulots-card$card"; done
usermod -G "$member_of" "$account"  # exactly these: no video, render or other card's group

slice="$base/etc/systemd/system/user-$uid.slice.d"
mkdir -p "$slice"
{
    printf '# gpulots: %s uses card(s) %s only (assign_cards.sh; revoke.sh removes it)\n' \
        "$account" "$cards"
    printf '[Slice]\nDevicePolicy=closed\n'
    for shared in /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia-modeset /dev/kfd; do
        [[ -e "$base$shared" ]] && printf 'DeviceAllow=%s rw\n' "$shared"
    done
    for path in "${allowed[@]}"; do printf 'DeviceAllow=%s rw\n' "$path"; done
} > "$slice/50-gpulots-cards.conf"
if [[ -z "$base" && -d /run/systemd/system ]]; then
    systemctl daemon-reload || true
fi
