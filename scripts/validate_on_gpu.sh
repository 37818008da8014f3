#!/usr/bin/env bash
# Run the validation benchmark on a machine with GPUs (NCCL on NVIDIA, RCCL on ROCm) and
# print its verdict; the full JSON report lands in ${OUT:-validation-report.json}.
#   scripts/validate_on_gpu.sh [--expected-arch sm_90] [--params-billion 1] [...]
# Needs only Python and the PyTorch the host's environment provides. With a single visible
# GPU the two-card part is skipped, and the report says so. Finishes in a few minutes.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-validation-report.json}"
python="${PYTHON:-python3}"
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no GPU visible to PyTorch")'
timeout 300 "$python" "$here/provisioning/validation/benchmark.py" --out "$out" "$@"
"$python" - "$out" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
stack, basics, split = report["stack"], report["essentials"], report["split_test"]
print("devices:", ", ".join(f"{d['name']} ({d['arch']}, {d['memory_gb']} GB)" for d in stack["devices"]))
print("torch", stack["torch"], "cuda", stack["cuda"], "hip", stack["hip"], "arch in build:", stack["arch_supported"])
print("matmul", basics["matmul"]["tflops"], "TFLOP/s", basics["matmul"]["dtype"], "· copy", basics["copy_bandwidth_gbps"], "GB/s")
print("one card:", split["one_card"])
print("two cards:", split["two_cards"])
print("verdict:", report["verdict"]["answer"])
PY
