#!/usr/bin/env bash
# Run the acceptance benchmark (report v2) on a machine with GPUs (NCCL on NVIDIA, RCCL on
# ROCm) and print the acceptance table and the verdict; the full JSON report lands in
# ${OUT:-validation-report.json}.
#   scripts/validate_on_gpu.sh [--cards 0 | --cards 0,1] [--params-billion 7] [...]
# CARDS or --cards (default: every GPU nvidia-smi lists; the visible-device variables are
# set to them, so --cards is taken here, not only passed on), THRESHOLDS (JSON; default: an
# H200's datasheet), PYTHON (the booked environment's interpreter), BENCH_TIMEOUT (the benchmark's --timeout,
# default 540 s; the process is killed 60 s after it). --require-gpu is always passed: no
# visible GPU is an acceptance failure (exit 6), never a CPU stand-in. One card: the
# collectives and the two-card split are skipped and the report says so. Exit status: the
# benchmark's (no report written: that status, and no summary).
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-validation-report.json}"
python="${PYTHON:-python3}"
args=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --cards) CARDS="${2:-}"; shift; [ "$#" -gt 0 ] && shift ;;
    --cards=*) CARDS="${1#--cards=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ -z "${CARDS:-}" ]; then
  count="$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)"
  [ "$count" -gt 0 ] || count=1
  CARDS="$(seq -s, 0 $((count - 1)))"
fi
thresholds="${THRESHOLDS:-{\"sku\": \"H200\", \"memory_gib\": 141, \"memory_share_min\": 0.9, \"bf16_tflops\": 989, \"fp8_tflops\": 1979, \"hbm_tbps\": 4.8, \"matmul_share_min\": 0.6, \"hbm_share_min\": 0.7, \"busbw_gbps_min\": 100, \"card_tolerance\": 0.1, \"min_torch\": \"2.7\", \"min_cuda\": \"12.8\", \"min_driver\": \"570\", \"arch\": \"sm_90\", \"ecc_required\": true}}"
budget="${BENCH_TIMEOUT:-540}"
rm -f "$out"  # a report left by an earlier run is never summarised as this one's
export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES="$CARDS" HIP_VISIBLE_DEVICES="$CARDS"
unset ROCR_VISIBLE_DEVICES
# The benchmark as the hosts get it: the one file built from its package (build.py prints it).
program="$("$python" "$here/provisioning/validation/build.py" benchmark)" || {
  echo "the benchmark could not be built" >&2
  exit 1
}
timeout -k 15 "$((budget + 60))" "$python" "$program" \
  --out "$out" --cards "$CARDS" --require-gpu --thresholds "$thresholds" --timeout "$budget" \
  ${args[@]+"${args[@]}"}
code=$?
if [ ! -s "$out" ]; then
  echo "no report at $out (exit $code)" >&2
  exit "$code"
fi
"$python" - "$out" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
stack = report.get("stack", {})
print("torch", stack.get("torch"), "cuda", stack.get("cuda"), "hip", stack.get("hip"),
      "nccl", stack.get("nccl"), "driver", stack.get("driver"), "python", stack.get("python"))
for check in report["acceptance"]["checks"]:
    mark = {True: "PASS", False: "FAIL", None: "----"}[check["passed"]]
    card = "" if check["card"] is None else f" card {check['card']}"
    print(f"{mark} {check['id']}{card}: {check['value']} {check['unit']} (ref {check['reference']}) {check['note']}")
for name, section in report["sections"].items():
    print(f"section {name}: {section['status']} {section['seconds']} s {section.get('error', '')[:200]}")
for name in ("all_reduce", "all_gather", "reduce_scatter"):
    rows = report.get("collectives", {}).get(name) or []
    if rows:
        top = rows[-1]
        print(f"{name} at {top['bytes'] / 2**20:.0f} MiB: busbw {top['busbw_gbps']} GB/s, correct {top['correct']}")
print("model:", report.get("model"))
print("verdict:", report.get("verdict", {}).get("measured"))
print("exit:", report.get("exit_code"), "accepted:", report["acceptance"]["passed"])
PY
exit "$code"
