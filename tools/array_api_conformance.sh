#!/usr/bin/env bash
# Runs the Python array API conformance suite (github.com/data-apis/array-api-tests, with
# its `array-api` submodule checked out) against jitdl.numpy and against NumPy itself,
# and prints the failures that are jitdl's own (those NumPy does not share).
#
#   bash tools/array_api_conformance.sh /path/to/array-api-tests [max_examples]
#
# The suite needs hypothesis and ndindex (pip install hypothesis ndindex pytest-json-report).
# jd.numpy's arrays are NumPy's, so the array-object tests (operators on ndarray) test NumPy;
# complex inputs go to NumPy's functions (their special cases pass or fail with hypothesis'
# draws, in either run). 2026-11-28: every jd.numpy failure was also NumPy's.
set -euo pipefail
suite=${1:?path to a checkout of data-apis/array-api-tests}
examples=${2:-30}
files="test_special_cases.py test_operators_and_elementwise_functions.py
       test_statistical_functions.py test_manipulation_functions.py
       test_searching_functions.py test_utility_functions.py test_indexing_functions.py
       test_linalg.py test_signatures.py"
out=$(mktemp -d)
for module in numpy jitdl.numpy; do
    (cd "$suite" && ARRAY_API_TESTS_MODULE=$module python -m pytest \
        $(for f in $files; do echo "array_api_tests/$f"; done) \
        --disable-extension linalg,fft -q --max-examples "$examples" --disable-deadline \
        -p no:cacheprovider -W ignore 2>&1 || true) \
        | grep "^FAILED\|passed\|failed" | sed 's/ - .*//' | sort > "$out/$module.txt"
    echo "$module: $(grep -v '^FAILED' "$out/$module.txt" | tail -1)"
done
echo "failures of jitdl.numpy that NumPy does not share:"
comm -13 <(grep '^FAILED' "$out/numpy.txt") <(grep '^FAILED' "$out/jitdl.numpy.txt") || true
