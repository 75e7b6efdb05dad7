#!/usr/bin/env bash
# make test's second lane: wait until the first lane's lab has published its llama.cpp build, so
# that the second lane's build (molecule supervisor) finds every object in the labs' shared ccache
# instead of compiling the same sources at the same time (a cold build keeps both cores busy for
# about 11 minutes), and integration-llama finds the build it loads.
# Done when the lab's node-a has the build, or the controller's build cache holds one (molecule
# default keeps it there, and it outlives the lab); returns at once when the lab is gone (its lane
# ended or failed) and after TIMEOUT_S regardless: the wait only saves time, it decides no result.
#
#   scripts/wait-for-lab-build.sh LAB [TIMEOUT_S]
set -u
lab=${1:?usage: scripts/wait-for-lab-build.sh LAB [TIMEOUT_S]}
timeout_s=${2:-1500}
link=/opt/gpulab/llama.cpp/current
start=$SECONDS
while [ $((SECONDS - start)) -lt "$timeout_s" ]; do
  if compgen -G '.cache/llama.cpp-builds/*/*.tar.gz' >/dev/null; then
    echo "a lab build is in the controller's cache after $((SECONDS - start)) s of waiting"; exit 0
  fi
  if ! podman container exists "$lab-node-a" 2>/dev/null; then
    echo "lab $lab has no node-a (any more): not waiting"; break
  fi
  if podman exec "$lab-node-a" test -L "$link" 2>/dev/null; then
    echo "lab $lab published its build after $((SECONDS - start)) s of waiting"; exit 0
  fi
  sleep 10
done
echo "lab $lab: no build after $((SECONDS - start)) s; going on (the build compiles what ccache lacks)"
