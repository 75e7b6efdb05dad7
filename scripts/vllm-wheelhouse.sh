#!/usr/bin/env bash
# A vLLM wheelhouse for a GPU host without internet (vllm_server_pip_find_links), carried in parts
# of bounded size when the only way in is a series of small transfers.
#
#   scripts/vllm-wheelhouse.sh download DIR [VERSION]   where PyPI is reachable: vLLM's wheel (cp312,
#                                                       manylinux x86_64) and the wheels it needs
#                                                       beyond a Python that already holds its torch
#   scripts/vllm-wheelhouse.sh pack DIR OUT [MIB]       OUT/part-1, part-2, ...: each at most MIB
#                                                       (default 55); larger wheels cut into pieces;
#                                                       SHA256SUMS of every whole wheel in each part
#   scripts/vllm-wheelhouse.sh stash PART STASH         on the host: keep one part's files in STASH
#   scripts/vllm-wheelhouse.sh join STASH WHEELHOUSE    on the host: join the pieces, check every
#                                                       wheel's sha256, move them into WHEELHOUSE
set -euo pipefail

# vLLM's runtime packages that a GPU image with torch, transformers and numpy may lack (measured
# against vLLM 0.24.0 on the accelerator machine: ../shared/ci facts, docs/benchmarks.md).
RUNTIME=(fastapi starlette pydantic pydantic-core annotated-types annotated-doc typing-inspection
  "typing-extensions>=4.16" uvicorn pyzmq msgspec cbor2 pybase64 openai jiter sniffio httpx2 httpcore2
  truststore openai-harmony "llguidance>=1.7,<1.8" xgrammar==0.2.9 apache-tvm-ffi watchfiles
  model-hosting-container-standards prometheus-fastapi-instrumentator partial-json-parser cachetools
  jmespath compressed-tensors==0.17.0 loguru
  # fastapi 0.165 (2026-11) imports opentelemetry
  opentelemetry-api importlib-metadata zipp lazy-importer)
PLATFORMS=(manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64
  manylinux_2_28_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64 manylinux1_x86_64)

die() { echo "vllm-wheelhouse: $*" >&2; exit 1; }

download() { # DIR [VERSION]
  local dir=$1 version=${2:-0.24.0} args=()
  for p in "${PLATFORMS[@]}"; do args+=(--platform "$p"); done
  mkdir -p "$dir"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${args[@]}" -d "$dir" "vllm==$version" "${RUNTIME[@]}"
  echo "wheels in $dir: $(find "$dir" -maxdepth 1 -name "*.whl" | wc -l)"
}

pack() { # DIR OUT [MIB]
  local dir=$1 out=$2 limit=$((${3:-55} * 1048576)) part=1 used=0 size name
  [ -d "$dir" ] || die "no directory $dir"
  rm -rf "$out" && mkdir -p "$out/part-1"
  (cd "$dir" && sha256sum ./*.whl | sed 's| \./| |') >"$out/SHA256SUMS"
  next() { part=$((part + 1)); used=0; mkdir -p "$out/part-$part"; }
  # Small wheels first, whole; the large ones after, cut to fill each part.
  while read -r size name; do
    if [ "$size" -le $((limit - used)) ]; then
      cp "$dir/$name" "$out/part-$part/"
      used=$((used + size))
      continue
    fi
    local offset=0 n=0 take
    while [ "$offset" -lt "$size" ]; do
      [ $((limit - used)) -gt 1048576 ] || next
      take=$((limit - used))
      [ "$take" -le $((size - offset)) ] || take=$((size - offset))
      n=$((n + 1))
      dd if="$dir/$name" of="$out/part-$part/$name.part$(printf %02d "$n")" bs=1M iflag=skip_bytes,count_bytes \
        skip="$offset" count="$take" status=none
      offset=$((offset + take))
      used=$((used + take))
    done
  done < <(cd "$dir" && stat -c '%s %n' ./*.whl | sed 's| \./| |' | sort -n)
  for p in "$out"/part-*; do cp "$out/SHA256SUMS" "$p/"; done
  rm "$out/SHA256SUMS"
  du -sh "$out"/part-* | sed 's/^/  /'
}

stash() { # PART STASH
  mkdir -p "$2"
  cp "$1"/* "$2"/
  echo "stashed $(find "$1" -maxdepth 1 -type f | wc -l) files of $1 in $2"
}

join_parts() { # STASH WHEELHOUSE
  local stash=$1 wheelhouse=$2 name
  [ -f "$stash/SHA256SUMS" ] || die "no SHA256SUMS in $stash: stash the parts first"
  mkdir -p "$wheelhouse"
  for first in "$stash"/*.whl.part01; do
    [ -e "$first" ] || continue
    name=$(basename "$first" .part01)
    cat "$stash/$name".part[0-9][0-9] >"$stash/$name.joining"
    mv "$stash/$name.joining" "$stash/$name"
    rm -f "$stash/$name".part[0-9][0-9]
  done
  (cd "$stash" && sha256sum --quiet -c SHA256SUMS) || die "a wheel in $stash is missing or damaged: stash every part again"
  while read -r _ name; do mv "$stash/$name" "$wheelhouse/"; done <"$stash/SHA256SUMS"
  echo "wheelhouse $wheelhouse: $(find "$wheelhouse" -maxdepth 1 -name "*.whl" | wc -l) wheels, sha256 checked"
}

case ${1:-} in
  download) download "${@:2}" ;;
  pack) pack "${@:2}" ;;
  stash) stash "${@:2}" ;;
  join) join_parts "${@:2}" ;;
  *) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
