#!/usr/bin/env bash
# `make test`: the whole suite through cargo, and at its end one total of every test binary's
# "test result" line (about 40 of them), with the failed tests named. Exits as cargo does.
set -uo pipefail
log=$(mktemp "${TMPDIR:-/tmp}/gpurun-test.XXXXXX")
trap 'rm -f "$log"' EXIT
cargo=${CARGO:-cargo}
# make dist's artefacts (tests/dist.rs reads them) are built while the test binaries compile:
# dist's last step, a fat-LTO link of one codegen unit, keeps one core busy for a minute or two
# that the tests' build uses the other for. Each has its own target directory (target/debug,
# target/<triple>/release), so neither waits for the other's lock.
if [ -n "${DIST_TARGET:-}" ]; then
    dist_log=$(mktemp "${TMPDIR:-/tmp}/gpurun-dist.XXXXXX")
    trap 'rm -f "$log" "$dist_log"' EXIT
    packaging/dist.sh "$DIST_TARGET" >"$dist_log" 2>&1 &
    dist=$!
    "$cargo" test --workspace --no-run --quiet "$@" 2>&1 | tail -n 20
    dist_status=0
    wait "$dist" || dist_status=$?
    cat "$dist_log"
    if [ "$dist_status" -ne 0 ]; then
        echo "make test: make dist failed (exit $dist_status), so its artefacts cannot be tested"
        exit "$dist_status"
    fi
fi
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
