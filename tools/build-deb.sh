#!/usr/bin/env bash
# Builds Strata's Debian packages (docs/packaging.md) from the committed
# tree (git HEAD: a package is always some commit, never half-edited files)
# and puts them in build/deb/: stratad, strata-cli, strata-tools,
# strata-appliance, their -dbgsym packages, the .changes and .buildinfo;
# then lintian on the .changes.
#
#   tools/build-deb.sh [--worktree] [--no-lintian] [--version V] [--out DIR] [--clean]
#
# --worktree   build the working tree as it is (uncommitted changes too)
# --no-lintian skip lintian
# --version V  build as package version V (a changelog entry is added in the
#              build's checkout, never in the tree): the next version for
#              tools/test-debs.sh's upgrade, e.g. 0.1.0+upgradetest1-1
# --out DIR    put the packages in DIR instead of build/deb/
# --clean      remove the build directory (/var/tmp/strata-deb-build) and stop
#
# Installs what it needs first (tools/install-deps.sh, and its --package).
# The build runs under /tmp/strata-build.lock, as every build on this
# machine, with 2 jobs, in a checkout kept in /var/tmp/strata-deb-build:
# the next build there recompiles only what changed (git rewrites only the
# files that differ, so ninja sees the rest as built). A first build takes
# 10-15 minutes on 2 cores; --clean frees its 1-2 GB.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
work=/var/tmp/strata-deb-build
worktree=false lintian=true newversion="" out=$repo/build/deb
usage() { echo "usage: tools/build-deb.sh [--worktree] [--no-lintian] [--version V] [--out DIR] [--clean]" >&2; exit 2; }
while (($#)); do
  case "$1" in
    --worktree) worktree=true ;;
    --no-lintian) lintian=false ;;
    --version) [[ $# -ge 2 ]] || usage; newversion=$2; shift ;;
    --out) [[ $# -ge 2 ]] || usage; out=$(mkdir -p "$2" && cd "$2" && pwd); shift ;;
    --clean) rm -rf "$work"; exit 0 ;;
    *) usage ;;
  esac
  shift
done

"$repo/tools/install-deps.sh" >/dev/null
"$repo/tools/install-deps.sh" --package >/dev/null

version=${newversion:-$(dpkg-parsechangelog -l "$repo/debian/changelog" -SVersion)}
src=$work/src
mkdir -p "$work" "$out"
[[ -d $src/.git ]] || { rm -rf "$src"; git init -q "$src"; }
git -C "$src" fetch -q "$repo" HEAD
git -C "$src" checkout -q -f --detach FETCH_HEAD
# What the last build left (debian/stratad/, stamps), but not its objects.
git -C "$src" clean -q -ffdx -e '/obj-*/'
if $worktree; then
  # The working tree's changes and new files over the commit.
  (cd "$repo" && { git diff --name-only -z HEAD; git ls-files -z --others --exclude-standard; } |
    xargs -0 -r cp --parents -t "$src" 2>/dev/null || true)
  echo "build-deb: strata $version from the working tree of $repo (on $(git -C "$repo" rev-parse --short HEAD))"
else
  echo "build-deb: strata $version from commit $(git -C "$repo" rev-parse --short HEAD)"
fi
if [[ -n $newversion ]]; then
  # A changelog entry on top, as `dch -v` would write it: dpkg-buildpackage
  # and debian/rules (STRATA_VERSION) take the version from there.
  maint=$(sed -n 's/^ -- \(.*>\)  .*/\1/p' "$src/debian/changelog" | head -n 1)
  { printf 'strata (%s) bookworm; urgency=medium\n\n  * Built by tools/build-deb.sh --version from %s.\n\n -- %s  %s\n\n' \
      "$newversion" "$(git -C "$repo" rev-parse --short HEAD)" "$maint" "$(date -R)"
    cat "$src/debian/changelog"; } >"$src/debian/changelog.new"
  mv "$src/debian/changelog.new" "$src/debian/changelog"
fi

start=$(date +%s)
rm -f "$work"/*.deb "$work"/*.changes "$work"/*.buildinfo
# -nc: no `debian/rules clean`, which would delete the objects (git clean did the rest).
(cd "$src" && flock /tmp/strata-build.lock dpkg-buildpackage -us -uc -b -nc -j2) >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log" >&2; cp "$work/build.log" "$out/build.log"; echo "build-deb: failed ($out/build.log)" >&2; exit 1; }
cp "$work/build.log" "$out/build.log"
arch=$(dpkg --print-architecture)
changes="$work/strata_${version}_${arch}.changes"
rm -f "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
for f in $(sed -n '/^Files:/,$p' "$changes" | awk 'NF == 5 {print $5}') "${changes##*/}"; do
  cp "$work/$f" "$out/"
done
echo "build-deb: $(( $(date +%s) - start )) s; in $out/:"
ls -1 "$out"/*.deb | sed 's|.*/|  |'
if $lintian; then
  # Every tag, the overridden ones too, to check docs/packaging.md's list against.
  lintian --info --display-info --show-overrides --pedantic "$out/${changes##*/}" || true
fi
