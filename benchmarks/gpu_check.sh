#!/bin/bash
# One device session's checks, in one call (the device tool's machines are lent for
# minutes): benchmarks/gpu.py, SGEMM sizes and conv2d, the CUDA runtime tests and the
# definition/op test battery on the GPU. Run from the repository root on the GPU machine:
#     bash benchmarks/gpu_check.sh            (logs and JSON under $OUT, else /tmp/out)
# Wheels the machine lacks (llvmlite, platformdirs: see the device README) go in .whl/.
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 JITDL_CACHE_DIR=/tmp/jdcache CUPY_TF32=0
O=${OUT:-/tmp/out}; mkdir -p "$O"
timeout 120 python3 benchmarks/gpu.py --json "$O/gpu.json" > "$O/bench.txt" 2>&1
timeout 90 python3 benchmarks/gpu_sizes.py > "$O/sizes.txt" 2>&1
timeout 60 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_cuda_runtime.py \
    -k "not emulated" > "$O/runtime.txt" 2>&1
# (tests marked cpu_only check the CPU target's own code: --target cuda skips them)
timeout 360 python3 -m pytest -q -n 14 -p no:cacheprovider --target cuda \
    tests/test_definitions.py tests/test_operators.py tests/test_nn.py tests/test_nn_more.py \
    tests/test_numpy_math.py tests/test_dynamic.py tests/test_numpy_eager.py \
    tests/test_numpy_shape.py tests/test_numpy_scalar_args.py tests/test_layers.py \
    tests/test_fuzz.py tests/test_fuzz_inference.py > "$O/target.txt" 2>&1
echo "=== runtime tests"; tail -1 "$O/runtime.txt"
echo "=== --target cuda"; grep -E "^(FAILED|ERROR)|passed|failed" "$O/target.txt" | cut -c1-200 | head -40
echo "=== sizes"; cat "$O/sizes.txt"
echo "=== benchmarks/gpu.py"; tail -12 "$O/bench.txt"
