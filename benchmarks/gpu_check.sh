#!/usr/bin/env bash
# The GPU checks of issue 39, in one run of under 8 minutes on a lent device machine (run from the repository root):
#
#   bash benchmarks/gpu_check.sh            # results under $OUT (or ./gpu_check_out when OUT is unset)
#
# 1. pytest, compiled (no TRITON_INTERPRET): every Triton test against the reference on the GPU, bf16 included
#    (the interpreter cannot check bf16), several blocks per step, the compile check for sm_75/sm_80/sm_90, and
#    lesson 03's GPU measurement (tests/test_triton_attention.py runs it on the device there), and the kernel at
#    the chosen partition sizes (tests/test_triton_partition_size.py).
# 2. Lesson 03's timing section as a learner with this GPU gets it: speed_table.measure_here on the lesson's
#    batch, twice, its table, the gate's question and the choice it would count right.
# 3. benchmarks/triton_attention.py in fp16 and in bf16 (sharegpt-like, 32 x 4k, 4 x 16k), with the partitioned
#    kernel at one, two and four blocks per step (the A/B of issue 39 item 1), and at the partition size the
#    library now chooses by default (--chosen): per case a line "chosen partition tokens (N SMs): 256 (x1), ...",
#    and the rows triton_split_chosen, triton_split_chosen_x2, triton_split_chosen_x4, to compare with
#    triton_split_512, _512_x2, _512_x4 (same blocks per step). On 132 SMs (H100, H200) the rule picks 256 in
#    all three cases, so the chosen rows should repeat triton_split_256[_xN] within noise; on other SM counts it
#    differs (a T4's 40: 256, 1024, 512). Three rows more per case, no new kernel compiled on 132 SMs.
# Each step writes its own log; a failing step does not stop the next. The device has its own torch and
# triton and nothing can be installed there, so the first lines say which versions ran.
set -u
OUT="${OUT:-gpu_check_out}"
mkdir -p "$OUT"
unset TRITON_INTERPRET
export TRITON_DEFAULT_FP_FUSION=1
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
start=$(date +%s)
step() {  # step NAME SECONDS COMMAND...: run it with a time limit, log to $OUT/NAME.log, record its status
    local name=$1 limit=$2; shift 2
    local t0=$(date +%s)
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
}
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    "$PY" -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__,
'triton', triton.__version__, 'cuda', torch.cuda.is_available())" 2>&1
    "$PY" -c "import pytest, hypothesis; print('pytest', pytest.__version__, 'hypothesis', hypothesis.__version__)" 2>&1
    cat /proc/loadavg
} >"$OUT/summary.txt"

step pytest 210 "$PY" -m pytest -q -p no:cacheprovider tests/test_triton_attention.py tests/test_triton_compile.py \
    tests/test_triton_partition_size.py
step lesson03 60 "$PY" - <<'EOF'
import numpy as np
from pagedkv_lib.kernels.gpu_timing import gpu_unavailable
from pagedkv_lib.lesson import speed_table as ST

assert gpu_unavailable() is None, gpu_unavailable()
rng = np.random.default_rng(0)                         # the lesson's batch (03_code, the memory-bound section)
ragged = rng.lognormal(6.0, 0.7, size=32).astype(int).clip(16, 2048).tolist()
for run in (1, 2):
    speed = ST.measure_here(ragged, num_kv_heads=8, head_dim=128, repeats=11)
    print(f"\n## run {run}\n")
    print(ST.rows_markdown(speed))
    print("\nquestion:", ST.paging_question(speed))
    print("answer:", ST.paging_answer(speed))
    print("\n" + ST.paging_reveal(speed)[1])
EOF
step triton_fp16 100 "$PY" benchmarks/triton_attention.py --dtype float16 --partitions 512,256 --blocks-per-step 2,4 \
    --chosen
step triton_bf16 100 "$PY" benchmarks/triton_attention.py --dtype bfloat16 --partitions 512,256 --blocks-per-step 2,4 \
    --chosen
echo "total: $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
