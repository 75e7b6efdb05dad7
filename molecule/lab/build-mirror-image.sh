#!/usr/bin/env bash
# Builds the lab mirror's image: the lab's base image (build-image.sh) with Debian's nginx added
# from the host's Debian mirror (apt-get download; the lab image already has every library nginx
# links). A real web server, so the model role's fetches meet real HTTP ranges and rate limits.
# The tag carries a hash of this script and of the base image's name; an unchanged one is reused.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
base=$(bash "$here/build-image.sh" --print-name)
tag_hash=$( (cat "$here/build-mirror-image.sh"; echo "$base") | sha256sum | cut -c1-12)
image="${GPULAB_LAB_MIRROR_IMAGE:-localhost/gpulab-lab-mirror:bookworm-$tag_hash}"

if [ "${1:-}" = "--print-name" ]; then
  echo "$image"
  exit 0
fi

if podman image exists "$image"; then
  echo "lab mirror image: $image (cached)"
  exit 0
fi

debs=$(mktemp -d /var/tmp/gpulab-mirror-debs.XXXXXX)
builder="gpulab-mirror-build-$$"
trap 'rm -rf "$debs" "$debs.log"; podman rm -f "$builder" >/dev/null 2>&1 || true' EXIT
chmod 0755 "$debs"
(cd "$debs" && apt-get download nginx nginx-common >"$debs.log" 2>&1) || { cat "$debs.log"; exit 1; }
# policy-rc.d: the package must not start nginx inside the build container.
podman run --name "$builder" --network none -e DEBIAN_FRONTEND=noninteractive -v "$debs:/debs:ro" "$base" /bin/sh -ec '
  printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d; chmod 0755 /usr/sbin/policy-rc.d
  dpkg -i /debs/*.deb
  rm -f /usr/sbin/policy-rc.d /etc/nginx/sites-enabled/default
  nginx -t' >"$debs.log" 2>&1 || { cat "$debs.log"; exit 1; }
rm -f "$debs.log"
podman commit --quiet --change 'CMD ["nginx", "-g", "daemon off;"]' "$builder" "$image" >/dev/null
echo "lab mirror image: $image built"
