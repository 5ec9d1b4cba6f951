#!/usr/bin/env bash
# dist.sh OS/ARCH...: the release artefacts of this checkout, into $DIST
# (emptied first). `make dist` runs it with the version, the link flags that
# stamp it and the SBOM tool; `make dist-check` checks what it wrote. Per platform:
#   gomsg_<version>_<os>_<arch>.tar.gz          gomsg, gomsgctl, gomsg-bench,
#                                               LICENSE, README.md, CHANGELOG.md
#   gomsg_<version>_<os>_<arch>.<command>.cdx.json   a CycloneDX SBOM of each
#                                               binary, read from the binary itself
# and SHA256SUMS over all of them (`sha256sum -c SHA256SUMS` checks a download).
#
# The binaries are static (CGO_ENABLED=0) and keep the embedded backends
# (`gomsg dev` runs from the archive). The same checkout, Go toolchain and tool
# give the same bytes: -trimpath, no VCS stamping (the commit is stamped
# instead), archive entries sorted, owned by 0 and dated at the commit, gzip
# without a name or time, SBOMs without a serial number or timestamp.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${VERSION:?dist.sh: set VERSION (make dist does: scripts/version.sh)}"
: "${LDFLAGS:?dist.sh: set LDFLAGS, the -X flags that stamp the version and commit (make dist does)}"
: "${CYCLONEDX_GOMOD:?dist.sh: set CYCLONEDX_GOMOD to the cyclonedx-gomod binary (make dist-tools installs it)}"
GO=${GO:-go}
DIST=${DIST:-dist}
TAR=${TAR:-tar}
[ $# -gt 0 ] || { echo "usage: dist.sh OS/ARCH..." >&2; exit 2; }

commands=(gomsg gomsgctl gomsg-bench)
docs=(LICENSE README.md CHANGELOG.md)
for p in "$@"; do
  case $p in
    linux/amd64 | linux/arm64 | darwin/amd64 | darwin/arm64) ;;
    *) echo "dist.sh: $p: the releases are for linux and darwin on amd64 and arm64" >&2; exit 2 ;;
  esac
done
if ! "$TAR" --version 2>/dev/null | grep -q 'GNU tar'; then
  echo "dist.sh: needs GNU tar for reproducible archives (macOS: brew install gnu-tar, then TAR=gtar)" >&2
  exit 1
fi
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}

rm -rf "$DIST"
mkdir -p "$DIST"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
artefacts=()
for p in "$@"; do
  os=${p%/*} arch=${p#*/}
  name=gomsg_${VERSION#v}_${os}_${arch}
  echo "dist.sh: $name" >&2
  mkdir "$stage/$name"
  pkgs=()
  for c in "${commands[@]}"; do pkgs+=("./cmd/$c"); done
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -buildvcs=false \
    -ldflags "-s -w $LDFLAGS" -o "$stage/$name/" "${pkgs[@]}"
  cp "${docs[@]}" "$stage/$name/"
  for c in "${commands[@]}"; do
    "$CYCLONEDX_GOMOD" bin -json -noserial -notimestamp -version "$VERSION" \
      -output "$DIST/$name.$c.cdx.json" "$stage/$name/$c"
    artefacts+=("$name.$c.cdx.json")
  done
  "$TAR" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" --mode=u+rwX,go+rX,go-w \
    -C "$stage" -cf - "$name" | gzip -n -9 > "$DIST/$name.tar.gz"
  artefacts+=("$name.tar.gz")
done
(cd "$DIST" && printf '%s\n' "${artefacts[@]}" | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
echo "dist.sh: $(cd "$DIST" && ls | tr '\n' ' ')" >&2
