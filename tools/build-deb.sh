#!/usr/bin/env bash
# Builds Strata's Debian packages (docs/packaging.md) from the committed
# tree (git HEAD: a package is always some commit, never half-edited files)
# and puts them in build/deb/: stratad, strata-cli, strata-tools,
# strata-appliance, their -dbgsym packages, the .changes and .buildinfo;
# then lintian on the .changes.
#
#   tools/build-deb.sh [--worktree] [--no-lintian]
#
# --worktree  build the working tree as it is (uncommitted changes too)
# Installs what it needs first (tools/install-deps.sh and --package). The
# build runs under /tmp/strata-build.lock, as every build on this machine,
# with 2 jobs; the tree is copied to /var/tmp/strata-deb-build (removed after).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
worktree=false lintian=true
for arg in "$@"; do
  case "$arg" in
    --worktree) worktree=true ;;
    --no-lintian) lintian=false ;;
    *) echo "usage: tools/build-deb.sh [--worktree] [--no-lintian]" >&2; exit 2 ;;
  esac
done

"$repo/tools/install-deps.sh" >/dev/null
"$repo/tools/install-deps.sh" --package >/dev/null

version=$(dpkg-parsechangelog -l "$repo/debian/changelog" -SVersion)
work=/var/tmp/strata-deb-build
rm -rf "$work"
mkdir -p "$work/src" "$repo/build/deb"
trap 'rm -rf "$work"' EXIT
if $worktree; then
  # Tracked and untracked files not ignored, as they are now.
  git -C "$repo" ls-files -z --cached --others --exclude-standard |
    (cd "$repo" && xargs -0 cp --parents -t "$work/src" 2>/dev/null || true)
  echo "build-deb: strata $version from the working tree of $repo"
else
  git -C "$repo" archive HEAD | tar -x -C "$work/src"
  echo "build-deb: strata $version from commit $(git -C "$repo" rev-parse --short HEAD)"
fi

start=$(date +%s)
(cd "$work/src" && flock /tmp/strata-build.lock dpkg-buildpackage -us -uc -b -j2) >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log" >&2; cp "$work/build.log" "$repo/build/deb/build.log"; echo "build-deb: failed (build/deb/build.log)" >&2; exit 1; }
cp "$work/build.log" "$repo/build/deb/build.log"
arch=$(dpkg --print-architecture)
changes="$work/strata_${version}_${arch}.changes"
rm -f "$repo"/build/deb/*.deb "$repo"/build/deb/*.changes "$repo"/build/deb/*.buildinfo
for f in $(sed -n '/^Files:/,$p' "$changes" | awk 'NF == 5 {print $5}') "${changes##*/}"; do
  cp "$work/$f" "$repo/build/deb/"
done
echo "build-deb: $(( $(date +%s) - start )) s; in build/deb/:"
ls -1 "$repo"/build/deb/*.deb | sed 's|.*/|  |'
if $lintian; then
  # Every tag, overridden ones too (lintian --show-overrides), so that the
  # list in docs/packaging.md can be checked against it.
  lintian --info --display-info --show-overrides --pedantic "$repo/build/deb/${changes##*/}" || true
fi
