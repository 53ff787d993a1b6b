#!/usr/bin/env bash
# The suite on one CUDA GPU, in one pass of under 10 minutes: every method a few iterations,
# the peers compared on the same batches, one real Omniglot run. What docs/gpu.md describes.
#
#   bash bench/gpu_check.sh [DATA_DIR]       # DATA_DIR holds omniglot28.npz
#
# Each part has its own time limit, so one that hangs does not take the rest with it; the
# output names the device and torch by every number. Exit status: the number of parts that
# failed. Where packages are missing (a bare GPU machine), install the suite first
# (docs/gpu.md says how, offline included).
set -uo pipefail
export MLFLOW_DISABLE_TELEMETRY=true PYTHONUNBUFFERED=1
DATA="$(cd "${1:-${MESABENCH_DATA:-.}}" && pwd)"
PY="${PYTHON:-python3}"
WORK="$(mktemp -d)"
failed=0

part() {  # part TITLE SECONDS COMMAND...
    local title="$1" limit="$2"
    shift 2
    echo
    echo "== $title  ($(date -u +%H:%M:%S))"
    local began=$SECONDS
    timeout --signal=INT "$limit" "$@"
    local rc=$?
    echo "-- $title: exit $rc, $((SECONDS - began)) s"
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
}

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name(0))"

part "1. every method, a few iterations on CUDA, under the device guard" 180 \
    "$PY" bench/gpu_every_method.py --device cuda --store "$WORK/every.db"
part "2. MAML on sinusoid-5shot: ours vs learn2learn vs higher, same batches" 60 \
    "$PY" bench/maml_throughput.py --device cuda --repeats 20 --warmup 3
part "3. MAML Conv-4 on Omniglot 5-way 1-shot: vmapped vs looped vs higher, meta-batch 32" 60 \
    "$PY" bench/conv4_throughput.py --device cuda --meta-batch 32 --data-root "$DATA"
"$PY" -c "import sys; sys.path.insert(0, '.'); from pathlib import Path
from tests.image_fixtures import write_mnist; write_mnist(Path('$WORK/mnist'))"  # a generated stream
part "4. La-MAML: ours vs avalanche's lamaml_v2, same stream (generated MNIST)" 90 \
    env MESABENCH_DATA="$WORK/mnist" "$PY" bench/lamaml_throughput.py --device cuda --rounds 2 \
    --samples 250
part "5. mesa layer: block (Woodbury) and per-token forms vs a per-step solve" 45 \
    "$PY" bench/mesa_speed.py --device cuda --length 256 --batch 64 --rounds 3
export MESABENCH_DATA="$DATA"
part "6. maml, Omniglot 5-way 1-shot, 1,000 iterations (docs/earlier-results.md's CPU command)" 180 \
    "$PY" -m benchmarks run --method maml --benchmark omniglot-5w1s --device cuda \
    --set omniglot_split=maml --set rotations=true --set queries=5 --seed 0 \
    --set iterations=1000 --set val_every=500 --tracking-uri "sqlite:///$WORK/omniglot.db"
"$PY" - "$WORK/omniglot.db" <<'EOF'
import sys
from mlflow.tracking import MlflowClient
client = MlflowClient(f"sqlite:///{sys.argv[1]}")
for run in client.search_runs([e.experiment_id for e in client.search_experiments()]):
    m, t = run.data.metrics, run.data.tags
    print(run.info.status, t.get("mesabench.method"), "device", run.data.params.get("device"),
          "| test accuracy", m.get("final/test_accuracy"), "| training s", m.get("final/train_time_s"),
          "| peak GPU MiB", m.get("final/peak_gpu_mib"), "|", t.get("mesabench.machine"))
EOF
part "7. bf16 autocast and torch.compile per training step" 100 \
    "$PY" bench/execution_speed.py --device cuda --steps 20 --warmup 3 \
    --cases maml:omniglot-5w1s,lsa:linreg-icl
echo
echo "== $failed part(s) failed"
exit "$failed"
