#!/usr/bin/env bash
# The GPU check: what a machine with a CUDA device runs once to verify chaos's GPU paths (CI has no GPU).
#   1. what the machine has: torch and its CUDA, nvidia-smi, `chaos doctor` (its gpu rows say what can run);
#   2. the tests that need CUDA: `pytest -m gpu tests/gpu` (two-rank NCCL cases skip, saying why, on one GPU);
#   3. the CUDA digest benchmark (benchmarks/cuda_digest.py --quick: the digest every 10 steps vs the steps).
# Needs an interpreter with a CUDA build of torch and this package's test extras ($PYTHON, default
# .venv/bin/python; nothing is installed here). Results go under $OUT (default build/gpu-check): env.txt,
# nvidia-smi.txt, doctor.json, pytest.txt, gpu-tests.xml, cuda_digest.txt, CUDA_DIGEST.md. Extra arguments
# go to pytest (e.g. `-k watchdog`). Exits non-zero when a test failed or the benchmark could not run.
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=${OUT:-build/gpu-check}
mkdir -p "$out"
tmp=$(mktemp -d /tmp/chaos-gpu-check.XXXXXX)  # short: run directories hold unix sockets
rc=0

"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available",
torch.cuda.is_available(), "devices", torch.cuda.device_count())' 2>&1 | tee "$out/env.txt"
if command -v nvidia-smi >/dev/null; then nvidia-smi > "$out/nvidia-smi.txt" 2>&1; else echo "no nvidia-smi" > "$out/nvidia-smi.txt"; fi
"$py" -m chaos.cli doctor --json > "$out/doctor.json" 2>&1 || rc=1
"$py" -c 'import json, sys
for r in json.load(open(sys.argv[1])):
    if r["group"] == "gpu": print("%-32s %-9s %s" % (r["name"], r["status"], r["detail"]))' "$out/doctor.json" 2>&1 | tee -a "$out/env.txt"

CHAOS_CACHE_DIR="$tmp/cache" "$py" -m pytest -m gpu tests/gpu -v -rs -p no:cacheprovider --basetemp="$tmp/pytest" \
    --junitxml="$out/gpu-tests.xml" "$@" 2>&1 | tee "$out/pytest.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1

"$py" -m benchmarks.cuda_digest --quick --out "$out/CUDA_DIGEST.md" 2>&1 | tee "$out/cuda_digest.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1

rm -rf "$tmp"
echo "gpu-check: results in $out (exit $rc)"
exit $rc
