#!/usr/bin/env bash
# Makes a llama.cpp source archive without GitHub: the llama-cpp-python sdist on PyPI carries
# the whole llama.cpp tree under vendor/llama.cpp. The archive's top directory is `llama.cpp/`.
set -euo pipefail
version=$1 dest=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-binary :all: --no-deps -d "$work" "llama-cpp-python==$version"
tar -C "$work" -xzf "$work"/llama_cpp_python-"$version".tar.gz
mv "$work/llama_cpp_python-$version/vendor/llama.cpp" "$work/llama.cpp"
# The sdist's .git is a pointer into a parent repository that is not shipped.
rm -f "$work/llama.cpp/.git"
mkdir -p "$(dirname "$dest")"
# Reproducible bytes (sorted names, fixed owners and times, no gzip timestamp): the build id
# hashes the archive, so the same source must give the same archive on every machine.
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime='2000-01-01 00:00:00 UTC' \
  -cf - llama.cpp | gzip -n >"$dest.tmp"
mv "$dest.tmp" "$dest"
echo "    $dest ($(du -h "$dest" | cut -f1))"
