# Host-side helpers for the tests that run a script in the Debian 12 test
# guest of /work/shared/guest (QEMU, Debian's kernel): sourced by
# tests/target/guest_iscsi_test.sh and tests/controller/guest_multipath_test.sh.
#
# Before sourcing, set `test_name` (for messages), `budget` (seconds, the
# image build included) and `start_time` ($SECONDS at the start).
# guest_prepare SHARE_DIR builds (or finds) the image, which needs
# e2fsprogs, and shares with the guest Debian's ext4.ko and its
# dependencies at SHARE_DIR/modules (load order in SHARE_DIR/modules/order;
# the image carries no ext4 module) and the guest-side helpers
# (strata_guest.sh, which guest scripts source from /share). It skips
# (exit 77, loudly) only when the guest cannot run here.
guest_dir=${GUEST_DIR:-/work/shared/guest}
# The image needs mkfs.ext4, which the harness's default image lacks (adding
# it to the shared cache would make every other guest test rebuild it).
export GUEST_CACHE=${GUEST_CACHE:-/var/tmp/storage-guest-e2fsprogs}
case " ${GUEST_EXTRA_PKGS:-} " in *" e2fsprogs "*) ;; *) export GUEST_EXTRA_PKGS="${GUEST_EXTRA_PKGS:-} e2fsprogs" ;; esac

guest_skip() {
  local line='*************************************************************************'
  local msg="$line"$'\n'"SKIP: $test_name: the test guest cannot run here: $*"$'\n'"$line"
  echo "$msg"
  echo "$msg" >&2
  exit 77
}
remaining() { echo $((budget - (SECONDS - start_time))); }

guest_prepare() {
  local share=$1 log here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  [[ -x "$guest_dir/run-guest.sh" ]] || guest_skip "no guest harness at $guest_dir/run-guest.sh"
  [[ "$(id -u)" = 0 ]] || guest_skip "run-guest.sh needs root (mmdebstrap, 9p shares); this is uid $(id -u)"
  log=$(mktemp)
  echo "== guest image in $GUEST_CACHE (GUEST_EXTRA_PKGS=$GUEST_EXTRA_PKGS)"
  if ! timeout -k 10 "$(remaining)" "$guest_dir/run-guest.sh" -b >"$log" 2>&1; then
    tail -n 25 "$log" | sed 's/^/    /'
    rm -f "$log"
    guest_skip "the guest image could not be built (run-guest.sh -b failed; log above)"
  fi
  rm -f "$log"
  command -v qemu-system-x86_64 >/dev/null || guest_skip "qemu-system-x86_64 is not installed (Debian package qemu-system-x86)"
  mkdir -p "$share/modules"
  cp "$here/strata_guest.sh" "$share/"
  local kver ko
  kver=$(cat "$GUEST_CACHE/kver" 2>/dev/null)
  while read -r ko; do
    cp "$ko" "$share/modules/" && basename "$ko" >>"$share/modules/order"
  done < <(modprobe -d "$GUEST_CACHE/base/kroot" -S "$kver" --show-depends ext4 2>/dev/null | awk '$1 == "insmod" {print $2}')
  grep -q '^ext4\.ko' "$share/modules/order" 2>/dev/null ||
    guest_skip "no ext4.ko for guest kernel '$kver' under $GUEST_CACHE/base/kroot to share with the guest"
}
