#!/usr/bin/env bash
# The packages' life on a fresh Debian 12 machine, under real systemd
# (docs/packaging.md "Install, upgrade, remove, purge"): boots a throwaway
# Debian 12 VM under QEMU (TCG) and, on its serial console as root:
#
#   1 install N: `apt install ./stratad_N.deb ./strata-cli_N.deb
#     ./strata-tools_N.deb` starts stratad on the embedded default
#     (Type=notify: apt returns once it serves) and prints how to connect;
#     the unit is active with its watchdog, the API answers
#   2 data: qemu-io (libiscsi) writes patterns to LUN 0 through the portal
#     the postinst printed; the admin edits /etc/strata/strata.toml
#   3 upgrade to N+1 (`apt install` of the next version's .debs): stratad
#     restarted as N+1, the same volume, the patterns read back, the edited
#     conffile kept
#   4 a kill -9 of stratad: systemd restarts it (Restart=on-failure), the
#     patterns read back; a SIGSTOPped stratad: the watchdog kills it, and
#     it is restarted
#   5 `apt remove stratad`: stratad stopped; /etc/strata and /var/lib/strata
#     stay; installing again serves the same data
#   6 `apt purge stratad`: /etc/strata gone, /var/lib/strata kept (and the
#     postrm says so)
#   7 install again: the new default strata.toml finds the same array; the
#     same volume, the patterns read back
#
# The VM has no network: its apt lists and the packages' dependencies are
# in its image (downloaded when it was built), as a machine with a mirror
# would fetch them. The image (mmdebstrap, `mke2fs -d`; no loop devices) is
# cached in $STRATA_DEBTEST_CACHE (default /var/tmp/strata-debtest) and
# each run boots a copy-on-write overlay of it: every run is a fresh machine.
#
# Usage (as root): tools/test-debs.sh [N-DEBS-DIR [N+1-DEBS-DIR]]
#   N defaults to build/deb; N+1 to a build of HEAD as version N+upgradetest1
#   (tools/build-deb.sh --version ... --out /var/tmp/strata-debs-next).
#   -r as the first argument rebuilds the cached image.
# Not in CI: it takes about 10 minutes under TCG.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
rebuild=false
[[ ${1:-} == -r ]] && { rebuild=true; shift; }
[[ ${1:-} == -h ]] && { sed -n 2,33p "$0"; exit 0; }
debs_n=$(readlink -f "${1:-$repo/build/deb}")
debs_n1=${2:+$(readlink -f "$2")}
cache=${STRATA_DEBTEST_CACHE:-/var/tmp/strata-debtest}
mirror=${STRATA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
[[ $(id -u) -eq 0 ]] || { echo "test-debs: run as root (mmdebstrap's root mode)" >&2; exit 2; }
for t in mmdebstrap mke2fs qemu-system-x86_64 qemu-img python3 dpkg-deb; do
  command -v "$t" >/dev/null || { echo "test-debs: $t missing (tools/install-deps.sh --image)" >&2; exit 2; }
done

pkgs() {  # DIR: the .debs a server installs (no debug symbols, no appliance)
  local d
  for d in "$1"/stratad_*.deb "$1"/strata-cli_*.deb "$1"/strata-tools_*.deb; do
    [[ -f $d ]] || { echo "test-debs: no ${d##*/} in $1 (tools/build-deb.sh)" >&2; exit 2; }
    echo "$d"
  done
}
mapfile -t n_debs < <(pkgs "$debs_n")
version_n=$(dpkg-deb -f "${n_debs[0]}" Version)
if [[ -z $debs_n1 ]]; then
  debs_n1=/var/tmp/strata-debs-next
  next="${version_n%-*}+upgradetest1-1"
  have=$(dpkg-deb -f "$debs_n1"/stratad_*.deb Version 2>/dev/null || true)
  if [[ $have != "$next" ]]; then
    echo "test-debs: building N+1 ($next) into $debs_n1"
    "$here/build-deb.sh" --version "$next" --out "$debs_n1" --no-lintian
  fi
fi
mapfile -t n1_debs < <(pkgs "$debs_n1")
version_n1=$(dpkg-deb -f "${n1_debs[0]}" Version)
dpkg --compare-versions "$version_n1" gt "$version_n" ||
  { echo "test-debs: $version_n1 is not newer than $version_n" >&2; exit 2; }

started=$(date +%s)
transcript=${STRATA_TEST_TRANSCRIPT:-/var/tmp/strata-test-debs.transcript}
: >"$transcript"
say() { echo "[$(printf '%4d' $(($(date +%s) - started))) s] $*" | tee -a "$transcript"; }

# ---- the fresh machine's image ------------------------------------------------
# What a minimal Debian 12 server has (systemd, apt, a kernel), plus the
# initiator tools the test uses as a database host on the same machine would
# (qemu-io with libiscsi, iscsi-ls). The dependencies of the Strata
# packages are downloaded into apt's cache, not installed.
include=(systemd systemd-sysv udev dbus linux-image-amd64 initramfs-tools zstd login passwd
  iproute2 kmod procps less qemu-utils qemu-block-extra libiscsi-bin)
deps_key=$(for d in "${n_debs[@]}" "${n1_debs[@]}"; do dpkg-deb -f "$d" Package Depends; done | sort -u)
key=$( { echo "${include[*]}"; echo "$deps_key"; sed -n '/^# ---- the fresh/,/^# ---- boot/p' "$0"; } | sha256sum | cut -c1-16)
base=$cache/debian12-$key
if $rebuild || [[ ! -f $base/root.img ]]; then
  say "building the Debian 12 image ($base)"
  rm -rf "$cache"; mkdir -p "$base"
  work=$(mktemp -d /var/tmp/strata-debtest-build-XXXXXX)
  trap 'rm -rf --one-file-system "$work"' EXIT
  mkdir -p "$work/debs"; cp "${n_debs[@]}" "${n1_debs[@]}" "$work/debs/"
  # The serial console logs root in: the VM is the test's, thrown away after.
  mmdebstrap --variant=apt --mode=root --format=directory --quiet \
    --include="$(IFS=,; echo "${include[*]}")" \
    --skip=cleanup/apt/lists --skip=cleanup/apt/cache \
    --customize-hook="mkdir -p \"\$1/tmp/debs\" && cp $work/debs/*.deb \"\$1/tmp/debs/\"" \
    --customize-hook='chroot "$1" sh -c "apt-get install -y -q --download-only /tmp/debs/*.deb"' \
    --customize-hook='rm -rf "$1/tmp/debs" "$1"/var/cache/apt/archives/strata*.deb' \
    --customize-hook='mkdir -p "$1/etc/systemd/system/serial-getty@ttyS0.service.d" && printf "[Service]\nExecStart=\nExecStart=-/sbin/agetty --autologin root --keep-baud 115200 %%I \$TERM\n" >"$1/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf"' \
    --customize-hook='echo debtest >"$1/etc/hostname"; printf "127.0.0.1 localhost\n127.0.1.1 debtest\n" >"$1/etc/hosts"; : >"$1/etc/machine-id"; echo "/dev/vda / ext4 rw 0 1" >"$1/etc/fstab"' \
    --customize-hook='chroot "$1" systemctl disable apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer >/dev/null 2>&1 || true' \
    bookworm "$work/root" "$mirror" >"$work/mmdebstrap.log" 2>&1 ||
    { tail -30 "$work/mmdebstrap.log" >&2; echo "test-debs: mmdebstrap failed" >&2; exit 1; }
  cp "$(ls "$work"/root/boot/vmlinuz-* | sort -V | tail -1)" "$base/vmlinuz"
  cp "$(ls "$work"/root/boot/initrd.img-* | sort -V | tail -1)" "$base/initrd.img"
  mke2fs -q -t ext4 -d "$work/root" -E root_owner=0:0 "$base/root.img" 6G
  say "image: $(du -sh --apparent-size "$base/root.img" | cut -f1) apparent, $(du -sh "$base/root.img" | cut -f1) allocated;" \
    "$(ls "$work"/root/var/cache/apt/archives/*.deb | wc -l) dependency packages in apt's cache"
  rm -rf --one-file-system "$work"; trap - EXIT
fi

# ---- boot -----------------------------------------------------------------------
state=$(mktemp -d /var/tmp/strata-debtest-run-XXXXXX)
log=$state/console.log sock=$state/console.sock qemu_pid=""
cleanup() {
  [[ -n $qemu_pid ]] && kill "$qemu_pid" 2>/dev/null && wait "$qemu_pid" 2>/dev/null
  cp "$log" "${transcript%.transcript}.console.log" 2>/dev/null || true
  rm -rf "$state"
}
trap cleanup EXIT
fail() { say "FAIL: $*"; say "console tail:"; tail -30 "$log" | tr -d '\r' | tee -a "$transcript"; exit 1; }
mkdir -p "$state/share/n" "$state/share/n1"
cp "${n_debs[@]}" "$state/share/n/"; cp "${n1_debs[@]}" "$state/share/n1/"
qemu-img create -q -f qcow2 -b "$base/root.img" -F raw "$state/root.qcow2"
: >"$log"
qemu-system-x86_64 -machine q35,accel=tcg -cpu max -smp 2 -m 2048 -nographic -no-user-config -nodefaults \
  -kernel "$base/vmlinuz" -initrd "$base/initrd.img" \
  -append "root=/dev/vda rw console=ttyS0,115200 panic=10" \
  -chardev socket,id=con,path="$sock",server=on,wait=off,logfile="$log",logappend=on -serial chardev:con \
  -drive if=none,id=root,file="$state/root.qcow2",format=qcow2,cache=unsafe -device virtio-blk-pci,drive=root \
  -virtfs local,path="$state/share",mount_tag=debs,security_model=none,readonly=on \
  -nic none >"$state/qemu.out" 2>&1 &
qemu_pid=$!
say "Debian 12 VM (TCG, 2 vCPUs, no network); N = $version_n, N+1 = $version_n1"
t0=$SECONDS
until tr -d '\r' <"$log" | grep -q 'debtest login: root (automatic login)'; do
  kill -0 "$qemu_pid" 2>/dev/null || fail "QEMU exited: $(cat "$state/qemu.out")"
  ((SECONDS - t0 < 600)) || fail "no console login within 600 s"
  sleep 2
done
sleep 2
python3 "$here/appliance/console.py" "$sock" login unused 120 || fail "console"
say "booted in $(($(date +%s) - started)) s"
vm() {  # TIMEOUT_S COMMAND: runs COMMAND as root on the console; its output to the transcript
  local t=$1; shift
  echo "    vm# $*" >>"$transcript"
  python3 "$here/appliance/console.py" "$sock" run "$t" "$@" | tee -a "$transcript"
  return "${PIPESTATUS[0]}"
}
vmq() { python3 "$here/appliance/console.py" "$sock" run "$@"; }  # quiet: output only to the caller
# apt's progress bar and colours off: the transcript is text.
vm 60 'export DEBIAN_FRONTEND=noninteractive SYSTEMD_PAGER=; printf "Binary::apt::Dpkg::Progress-Fancy \"0\";\nBinary::apt::APT::Color \"0\";\nquiet \"1\";\n" >/etc/apt/apt.conf.d/90test-debs; mkdir -p /mnt/debs && mount -t 9p -o trans=virtio,version=9p2000.L,ro debs /mnt/debs && ls /mnt/debs/n /mnt/debs/n1' ||
  fail "the packages' share"
vm 30 'cat /etc/debian_version; uname -r; systemctl --version | head -1; ls /var/lib/strata /etc/strata 2>&1' || true

lun=iscsi://127.0.0.1:3260/iqn.2026-11.io.strata:array/0
patterns() {  # WHEN: the patterns read back through LUN 0
  local out
  out=$(vmq 300 "qemu-io -f raw -r -c 'read -P 0xa5 0 4M' -c 'read -P 0x5a 1G 4M' $lun 2>&1") || true
  echo "$out" | tee -a "$transcript"
  [[ $(grep -c '^read ' <<<"$out") == 2 && $out != *"verification failed"* ]] || fail "the patterns did not read back ($1)"
  say "the patterns read back ($1)"
}
main_pid() { vmq 30 'systemctl show -P MainPID stratad' | grep -E '^[0-9]+$' | tail -n 1; }
serving_again() {  # OLD_PID LIMIT_S: waits for a new main process that answers the API
  local t0=$SECONDS
  until [[ $(main_pid) != "$1" ]] && vmq 20 'systemctl is-active -q stratad && timeout 5 strata version >/dev/null 2>&1' >/dev/null; do
    ((SECONDS - t0 < $2)) || return 1
    sleep 3
  done
}

# ---- 1: install N ----------------------------------------------------------------------
say "1. install $version_n"
out=$(vmq 900 'cd /mnt/debs/n && apt install -y ./stratad_*.deb ./strata-cli_*.deb ./strata-tools_*.deb 2>&1; echo apt-rc=$?')
echo "$out" | grep -Ev '^(Get|Selecting|Preparing|Unpacking (lib|qemu)|Setting up (lib|qemu)|Processing)' | tee -a "$transcript"
grep -q 'apt-rc=0$' <<<"$out" || fail "apt install of $version_n"
grep -q 'stratad is running' <<<"$out" || fail "the postinst did not say how to connect"
grep -q 'iSCSI portal: *127.0.0.1:3260' <<<"$out" || fail "the postinst did not name the portal"
vm 30 'systemctl show -p ActiveState,SubState,Type,WatchdogUSec,Restart,NRestarts stratad' | tee "$state/show"
grep -q 'SubState=running' "$state/show" || fail "stratad is not running"
vm 30 'systemctl is-enabled stratad; stratad --version; strata version; strata controller list; strata volume list' || fail "the API"
vm 30 "strata version | grep -q '^strata ${version_n%-*},'" || fail "stratad does not report $version_n"
vm 30 'journalctl -u stratad -o cat --no-pager | tail -n 4'
vm 30 'ls -la /var/lib/strata; du -sh /var/lib/strata'
vm 30 'strata volume list' >"$state/volumes-n"

# ---- 2: data ----------------------------------------------------------------------
say "2. data: patterns through iSCSI; an edit of /etc/strata/strata.toml"
vm 60 "iscsi-ls iscsi://127.0.0.1:3260" || fail "iscsi-ls"
out=$(vmq 300 "qemu-io -f raw -c 'write -P 0xa5 0 4M' -c 'write -P 0x5a 1G 4M' $lun 2>&1") || true
echo "$out" | tee -a "$transcript"
[[ $(grep -c '^wrote ' <<<"$out") == 2 ]] || fail "qemu-io write"
patterns "installed"
vm 30 'echo "# edited by the administrator (test-debs)" >>/etc/strata/strata.toml'

# ---- 3: upgrade -------------------------------------------------------------------
say "3. upgrade to $version_n1"
pid=$(main_pid)
out=$(vmq 900 'cd /mnt/debs/n1 && apt install -y ./stratad_*.deb ./strata-cli_*.deb ./strata-tools_*.deb 2>&1; echo apt-rc=$?')
echo "$out" | tee -a "$transcript"
grep -q 'apt-rc=0$' <<<"$out" || fail "apt install of $version_n1"
grep -q "Unpacking stratad ($version_n1) over ($version_n)" <<<"$out" || fail "not an upgrade of stratad"
vm 30 "strata version | grep -q '^strata ${version_n1%-*},'" || fail "stratad does not report $version_n1"
vm 30 'strata version; systemctl show -p SubState,NRestarts stratad'
[[ $(main_pid) != "$pid" ]] || fail "stratad was not restarted by the upgrade"
say "stratad restarted (pid $pid -> $(main_pid))"
vm 30 'strata volume list' >"$state/volumes-n1"
diff "$state/volumes-n" "$state/volumes-n1" >/dev/null || fail "the volumes changed: $(diff "$state/volumes-n" "$state/volumes-n1")"
say "the same volumes"
patterns "after the upgrade"
vm 30 'tail -n 1 /etc/strata/strata.toml | grep -q "edited by the administrator"' || fail "the edited conffile was replaced"
say "the edited strata.toml kept"

# ---- 4: a crash -----------------------------------------------------------------------
say "4. kill -9 stratad: systemd restarts it"
pid=$(main_pid)
vm 30 'systemctl kill -s KILL stratad'
t0=$SECONDS
serving_again "$pid" 180 || fail "stratad was not restarted after kill -9"
vm 30 'systemctl show -p NRestarts stratad; journalctl -u stratad -o cat --no-pager | grep -E "Main process exited|Scheduled restart" | tail -n 2'
say "serving again $((SECONDS - t0)) s after the kill (RestartSec=5s)"
patterns "after kill -9"
say "4b. SIGSTOP stratad: the watchdog (WatchdogSec=30s) kills it and systemd restarts it"
pid=$(main_pid)
vm 30 'systemctl show -P NRestarts stratad; systemctl kill -s STOP stratad'
t0=$SECONDS
serving_again "$pid" 240 || fail "a stopped stratad was not killed by the watchdog"
vm 30 'systemctl show -P NRestarts stratad; journalctl -u stratad -o cat --no-pager | grep -E "Watchdog timeout|Killing process|Scheduled restart" | tail -n 3'
vm 30 'journalctl -u stratad -o cat --no-pager | grep -q "Watchdog timeout"' || fail "no watchdog timeout in the journal"
say "the watchdog killed the stopped stratad; serving again $((SECONDS - t0)) s after the SIGSTOP"
patterns "after the watchdog restart"

# ---- 5: remove, install again -----------------------------------------------------------
say "5. apt remove stratad"
out=$(vmq 300 'apt remove -y stratad 2>&1; echo apt-rc=$?'); echo "$out" | tail -n 4 | tee -a "$transcript"
grep -q 'apt-rc=0$' <<<"$out" || fail "apt remove"
vm 30 '! systemctl is-active -q stratad && test -f /etc/strata/strata.toml && test -d /var/lib/strata && ls /var/lib/strata' ||
  fail "remove: stratad still running, or the configuration or the array gone"
say "stopped; /etc/strata and /var/lib/strata kept"
out=$(vmq 600 'cd /mnt/debs/n1 && apt install -y ./stratad_*.deb 2>&1; echo apt-rc=$?'); echo "$out" | tail -n 6 | tee -a "$transcript"
grep -q 'apt-rc=0$' <<<"$out" || fail "apt install after remove"
patterns "installed again after remove"

# ---- 6: purge -------------------------------------------------------------------------
say "6. apt purge stratad"
out=$(vmq 300 'apt purge -y stratad 2>&1; echo apt-rc=$?'); echo "$out" | tail -n 6 | tee -a "$transcript"
grep -q 'apt-rc=0$' <<<"$out" || fail "apt purge"
grep -q 'kept /var/lib/strata' <<<"$out" || fail "the postrm did not say /var/lib/strata is kept"
vm 30 '! test -e /etc/strata && test -d /var/lib/strata && du -sh /var/lib/strata && ! systemctl cat stratad >/dev/null 2>&1' ||
  fail "purge: /etc/strata left, or /var/lib/strata removed"
say "/etc/strata removed, /var/lib/strata kept"

# ---- 7: install after the purge ---------------------------------------------------------
say "7. install again after the purge: the fresh strata.toml finds the same array"
out=$(vmq 600 'cd /mnt/debs/n1 && apt install -y ./stratad_*.deb 2>&1; echo apt-rc=$?'); echo "$out" | tail -n 6 | tee -a "$transcript"
grep -q 'apt-rc=0$' <<<"$out" || fail "apt install after purge"
vm 30 'strata volume list' >"$state/volumes-purged"
diff "$state/volumes-n" "$state/volumes-purged" >/dev/null || fail "the volumes changed: $(diff "$state/volumes-n" "$state/volumes-purged")"
patterns "installed again after the purge"
vm 30 'systemctl poweroff' >/dev/null 2>&1 || true
wait "$qemu_pid" 2>/dev/null || true; qemu_pid=""
say "PASS in $(($(date +%s) - started)) s; transcript $transcript"
