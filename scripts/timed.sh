#!/usr/bin/env bash
# Runs a step of `make test`, then prints its wall time so slow steps are visible in CI logs.
set -u
label=$1; shift
start=$(date +%s)
echo "==> [$label] started $(date -u +%H:%M:%S)"
"$@"; rc=$?
echo "==> [$label] rc=$rc in $(( $(date +%s) - start ))s"
exit $rc
