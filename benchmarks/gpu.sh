#!/usr/bin/env bash
# xformer's benchmark on a GPU machine, sized to finish in 8 minutes on one H200: every row at GPU
# sizes with bf16 autocast (training step vs torch.nn.Transformer and x-transformers, eager, with
# dropout 0 and all three compiled; run.py overhead; padding; cached greedy and beam decoding;
# attention cost C7 to n = 16k; attention vs LSTM C8; MFU against the measured bf16 matmul peak; a
# GPT-2-small decoder-only row), then the multi-process path on one GPU (trainer=ddp with one
# process over NCCL, and two processes sharing the GPU over gloo, both checked against a single
# process: benchmarks/multiprocess_check.py), then DDP throughput scaling when there are 2+ GPUs.
#
# Usage:  benchmarks/gpu.sh [OUT_DIR]        (default benchmarks/results/gpu-<date>-<time>)
# Env:    PYTHON      interpreter (default: .venv/bin/python if present, else python)
#         NGPUS       GPUs to scale over (default: all that nvidia-smi lists)
#         DDP_STEPS   training steps per DDP run (default 300; the first DDP_SKIP are not timed)
#         DDP_SKIP    steps excluded from the DDP throughput window (default 100)
#         DATA_ROOT   Multi30k raw files (default: $XFORMER_DATA/multi30k or ../shared/data/multi30k)
#         QUICK=1     tiny sizes and few steps: a smoke test of this script (numbers mean nothing)
#         SECTIONS    rows of the single-GPU bench (default: all but compile and ddp)
# Output: OUT_DIR/bench.json, OUT_DIR/ddp.json (keys: docs/bench.md), OUT_DIR/bench.txt (the tables),
#         OUT_DIR/multiprocess/multiprocess.json, OUT_DIR/nvidia-smi.txt, OUT_DIR/env.txt; the
#         script's wall time is the last line of bench.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-benchmarks/results/gpu-$(date +%Y%m%d-%H%M%S)}
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python; fi
fi
command -v nvidia-smi >/dev/null || { echo "gpu.sh: nvidia-smi not found: this script needs NVIDIA GPUs" >&2; exit 2; }
NGPUS=${NGPUS:-$(nvidia-smi -L | grep -c '^GPU')}
SECTIONS=${SECTIONS:-train_step,train_step_dropout0,train_step_compiled,overhead,padding,decoding,attention,recurrence,mfu,gpt2}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"

common=(--device cuda)
[[ "${QUICK:-0}" == 1 ]] && common+=(--quick) || common+=(--preset gpu)
[[ -n "${DATA_ROOT:-}" ]] && common+=(--data-root "$DATA_ROOT")

# DDP device counts: 1, 2, 4, ... up to NGPUS, and NGPUS itself
counts=""
n=1
while (( n < NGPUS )); do counts+="$n,"; n=$(( n * 2 )); done
counts+="$NGPUS"

{
  nvidia-smi
  nvidia-smi topo -m 2>/dev/null || true
} > "$OUT/nvidia-smi.txt"
{
  echo "date: $(date -Is)"; echo "host: $(hostname)"; echo "git: $(git rev-parse HEAD 2>/dev/null || echo n/a)"
  "$PYTHON" -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  "$PYTHON" -c 'import importlib.metadata as m; print("x-transformers", m.version("x-transformers"))' 2>/dev/null || echo "x-transformers: not installed (pip install -e .[bench])"
} > "$OUT/env.txt"
cat "$OUT/env.txt"

echo "== single-GPU rows: $SECTIONS" | tee "$OUT/bench.txt"
COLUMNS=160 "$PYTHON" -m xformer.cli bench "${common[@]}" --sections "$SECTIONS" --out "$OUT/bench.json" \
  | tee -a "$OUT/bench.txt"

echo "== multi-process path on one GPU: ddp x1 (NCCL), ddp x2 sharing GPU 0 (gloo) vs one process" | tee -a "$OUT/bench.txt"
"$PYTHON" benchmarks/multiprocess_check.py --accelerator gpu --out "$OUT/multiprocess" | tee -a "$OUT/bench.txt" \
  || echo "multiprocess check FAILED (see $OUT/multiprocess/*.log)" | tee -a "$OUT/bench.txt"

if (( NGPUS > 1 )); then
  echo "== DDP scaling over devices: $counts" | tee -a "$OUT/bench.txt"
  ddp=(--sections ddp --ddp-devices "$counts")
  [[ "${QUICK:-0}" == 1 ]] || ddp+=(--ddp-steps "${DDP_STEPS:-300}" --ddp-skip "${DDP_SKIP:-100}")
  COLUMNS=160 "$PYTHON" -m xformer.cli bench "${common[@]}" "${ddp[@]}" --out "$OUT/ddp.json" \
    | tee -a "$OUT/bench.txt"
fi

echo "gpu.sh wall time: ${SECONDS} s" | tee -a "$OUT/bench.txt"
echo "results in $OUT (bench.json, ddp.json, bench.txt)"
