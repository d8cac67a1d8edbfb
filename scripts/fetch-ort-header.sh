#!/usr/bin/env bash
# The onnxruntime C API header, which the PyPI onnxruntime wheel does not ship, for the fused
# LTC custom op (liquid_stream/runtime/ltc_ort.py): one file, onnxruntime_c_api.h, taken from Debian's
# libonnxruntime-dev package (a pinned version, checked by its SHA-256). The C API is
# versioned and append-only: the 1.21 header serves onnxruntime >= 1.21.
#   bash scripts/fetch-ort-header.sh DEST_DIR      (writes DEST_DIR/onnxruntime_c_api.h)
set -euo pipefail
dest=${1:?usage: fetch-ort-header.sh DEST_DIR}
deb=libonnxruntime-dev_1.21.0+dfsg-1_amd64.deb
sha=14f7d959d5deacbcf1504830d4189f91fc67382b399ed9ae9d3aa9c4050ced08
url=http://deb.debian.org/debian/pool/main/o/onnxruntime/$deb
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if command -v curl >/dev/null; then
  curl -fsSL --retry 3 -o "$tmp/$deb" "$url"
else
  python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
    "$url" "$tmp/$deb"
fi
echo "$sha  $tmp/$deb" | sha256sum -c --quiet -
dpkg-deb --fsys-tarfile "$tmp/$deb" | tar -x -C "$tmp" ./usr/include/onnxruntime/onnxruntime_c_api.h
mkdir -p "$dest"
mv "$tmp/usr/include/onnxruntime/onnxruntime_c_api.h" "$dest/onnxruntime_c_api.h.part"
mv "$dest/onnxruntime_c_api.h.part" "$dest/onnxruntime_c_api.h"
echo "onnxruntime C API header (Debian $deb) -> $dest/onnxruntime_c_api.h"
