#!/usr/bin/env bash
# `make test`: the whole suite through cargo, and at its end one total of every test binary's
# "test result" line (about 40 of them), with the failed tests named. Exits as cargo does.
set -uo pipefail
log=$(mktemp "${TMPDIR:-/tmp}/gpurun-test.XXXXXX")
trap 'rm -f "$log"' EXIT
cargo=${CARGO:-cargo}
# The suite waits far more than it computes (processes, NVML polls, signals, sleeps): twice as
# many test threads as CPUs nearly halves its wall time on two cores (the integration binary:
# 269 s with 2 threads, 145 s with 4, 102 s with 6, all green) and leaves every test its own
# time bounds. RUST_TEST_THREADS overrides it.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-$(( $(nproc 2>/dev/null || echo 1) * 2 ))}
"$cargo" test --workspace --no-fail-fast "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
awk '
    /^test result: / {
        for (i = 1; i <= NF; i++) {
            if ($(i + 1) ~ /^passed;?$/) passed += $i
            if ($(i + 1) ~ /^failed;?$/) failed += $i
            if ($(i + 1) ~ /^ignored;?$/) ignored += $i
        }
        binaries++
    }
    /^test .* \.\.\. FAILED$/ { sub(/^test /, ""); sub(/ \.\.\. FAILED$/, ""); names = names "\n  " $0 }
    END {
        printf "\nmake test: %d passed, %d failed, %d ignored, in %d test binaries", passed, failed, ignored, binaries
        if (failed > 0) printf "; failed:%s", names
        printf "\n"
    }
' "$log"
if [ "$status" -ne 0 ]; then
    echo "make test: FAILED (cargo test exited $status)"
fi
exit "$status"
