#!/usr/bin/env bash
# install_tool.sh ROOT ACCOUNT TOOL_FILE ORDER_FILE — the `gpulots` command in the account
# (the split test on the researcher's own job) and the order's facts it reads: the reference,
# the lot's job, the hypothesis booked, the API (idempotent: a retry replaces both files).
#
#   ~/.gpulots/gpulots.py     the tool: one file, a zipapp (python runs it whatever its name;
#                             Python 3.9+, its standard library; PyTorch in the job)
#   ~/.gpulots/bin/gpulots    runs it with the environment's python3 (GPULOTS_PYTHON to choose)
#   ~/.gpulots/order.json     {"reference": ..., "job": ..., "hypothesis": ..., "api": ...}
#
# ~/.gpulots/bin is on the account's PATH through ~/.gpulots-env (assign_cards.sh).
set -euo pipefail
root="$1" account="$2" tool="$3" order="$4"
home="$root/home/$account"
for path in "$home/.gpulots" "$home/.gpulots/bin" "$home/.gpulots/gpulots.py" \
    "$home/.gpulots/order.json" "$home/.gpulots/bin/gpulots"; do
    # root never writes through a link the account may have planted
    if [[ -L "$path" ]]; then echo "refused: $path is a symbolic link" >&2; exit 4; fi
done
# a zipapp's first entry is its __main__.py, stored as text: its first lines say what it is
head -c 200 "$tool" | grep -aq 'gpulots split-test' || { echo "refused: $tool is not the tool" >&2; exit 3; }
mkdir -p "$home/.gpulots/bin"
install -m 644 "$tool" "$home/.gpulots/gpulots.py"
install -m 644 "$order" "$home/.gpulots/order.json"
cat > "$home/.gpulots/bin/gpulots.new" <<'WRAPPER'
#!/bin/sh
# gpulots: the split test on your own job (installed with your lot): gpulots split-test --help
exec "${GPULOTS_PYTHON:-python3}" "$HOME/.gpulots/gpulots.py" "$@"
WRAPPER
chmod 755 "$home/.gpulots/bin/gpulots.new"
mv -f "$home/.gpulots/bin/gpulots.new" "$home/.gpulots/bin/gpulots"
if [[ "${GPULOTS_REAL_ACCOUNTS:-0}" == 1 ]]; then  # the account's own, as the rest of its home
    chown -R "$account:" "$home/.gpulots"
fi
