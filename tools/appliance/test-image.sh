#!/usr/bin/env bash
# Boots the appliance image under QEMU (TCG: no KVM) with UEFI (OVMF), six
# virtual data disks and the serial console on a socket, and checks it from
# the host the way an administrator would (not in CI: it takes minutes):
#
#   1 first boot: credentials printed on the console; the API's certificate
#     (its fingerprint as printed) answers HTTPS; `strata controller list`
#     with the token; iscsi-ls (CHAP) finds the target; qemu-io writes a
#     pattern to LUN 0
#   2 reboot: the pattern reads back
#   3 A/B upgrade: a second image (another version) on a virtual disk;
#     `strata-system upgrade` in the VM; it reboots into slot b, blessed once
#     stratad is ready; the pattern reads back
#   4 fallback: upgrade slot a again with 1 try, corrupt the slot, reboot:
#     the boot fails, systemd-boot falls back to slot b; the pattern reads back
#
# Port forwards bind on 127.0.0.1 only. The console is driven with the root
# password first boot printed (console.py); the image has no test backdoor.
#
# Usage: test-image.sh IMAGE.qcow2|raw [UPGRADE-IMAGE.raw]
#   Without UPGRADE-IMAGE, one is built (build-image.sh --version V+upgrade).
#   STRATA_TEST_PORT_BASE (default 17000): host ports BASE+3260, +50051-50000, +8080-8000.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
[[ $# -ge 1 ]] || { sed -n 2,25p "$0"; exit 2; }
image=$(readlink -f "$1")
upgrade=${2:+$(readlink -f "$2")}
base=${STRATA_TEST_PORT_BASE:-17000}
# STRATA_TEST_NO_DISKS=1: no data disks: first boot takes the embedded default
# (sparse files on strata-data); checks the API and stops there.
no_disks=false
[[ ${STRATA_TEST_NO_DISKS:-0} == 1 ]] && no_disks=true
p_iscsi=$((base + 3260)) p_api=$((base + 51)) p_https=$((base + 80))
strata=${STRATA_CLI:-$repo/build/release/tools/strata}
ovmf_code=/usr/share/OVMF/OVMF_CODE_4M.fd
ovmf_vars=/usr/share/OVMF/OVMF_VARS_4M.fd
for t in qemu-system-x86_64 qemu-img qemu-io iscsi-ls openssl curl python3; do
  command -v "$t" >/dev/null || { echo "test-image: $t missing (tools/install-deps.sh --image)" >&2; exit 2; }
done
[[ -x $strata ]] || { echo "test-image: no $strata (build the CLI)" >&2; exit 2; }

state=$(mktemp -d /var/tmp/strata-appliance-test-XXXXXX)
log=$state/console.log
sock=$state/console.sock
transcript=${STRATA_TEST_TRANSCRIPT:-/var/tmp/strata-appliance-test.transcript}
qemu_pid=""
started=$(date +%s)
boots=()
: >"$transcript"
say() { echo "[$(printf '%4d' $(($(date +%s) - started))) s] $*" | tee -a "$transcript"; }
fail() { say "FAIL: $*"; say "console tail:"; tail -40 "$log" | tee -a "$transcript"; exit 1; }
cleanup() {
  [[ -n $qemu_pid ]] && kill "$qemu_pid" 2>/dev/null && wait "$qemu_pid" 2>/dev/null
  cp "$log" "${transcript%.transcript}.console.log" 2>/dev/null || true
  rm -rf "$state"
}
trap cleanup EXIT

# ---- the VM's disks --------------------------------------------------------
fmt=$(qemu-img info --output=json "$image" | sed -n 's/.*"format": "\([a-z0-9]*\)".*/\1/p' | head -1)
# The boot disk: a copy-on-write overlay, larger than the image (first boot
# grows strata-data to its end).
qemu-img create -q -f qcow2 -b "$image" -F "$fmt" "$state/boot.qcow2" 8G
for i in 0 1 2 3; do truncate -s 8G "$state/hdd$i.img"; done
for i in 0 1; do truncate -s 4G "$state/ssd$i.img"; done
cp "$ovmf_vars" "$state/vars.fd"

boot_vm() {  # [extra qemu args...]: starts the VM in the background
  : >>"$log"
  qemu-system-x86_64 -machine q35,accel=tcg -cpu max -smp 2 -m 2048 -nographic -no-user-config -nodefaults \
    -drive if=pflash,format=raw,readonly=on,file="$ovmf_code" \
    -drive if=pflash,format=raw,file="$state/vars.fd" \
    -chardev socket,id=con,path="$sock",server=on,wait=off,logfile="$log",logappend=on -serial chardev:con \
    -drive if=none,id=boot,file="$state/boot.qcow2",format=qcow2,cache=unsafe \
    -device virtio-blk-pci,drive=boot,bootindex=0 \
    -device virtio-scsi-pci,id=scsi \
    $($no_disks || for i in 0 1 2 3; do
        echo "-drive if=none,id=hdd$i,file=$state/hdd$i.img,format=raw,cache=unsafe"
        echo "-device scsi-hd,bus=scsi.0,drive=hdd$i,serial=strata-hdd$i"
      done) \
    $($no_disks || for i in 0 1; do
        echo "-drive if=none,id=ssd$i,file=$state/ssd$i.img,format=raw,cache=unsafe"
        echo "-device scsi-hd,bus=scsi.0,drive=ssd$i,serial=strata-ssd$i,rotation_rate=1"
      done) \
    -netdev user,id=net,hostfwd=tcp:127.0.0.1:$p_iscsi-:3260,hostfwd=tcp:127.0.0.1:$p_api-:50051,hostfwd=tcp:127.0.0.1:$p_https-:8080 \
    -device virtio-net-pci,netdev=net \
    "$@" >>"$state/qemu.out" 2>&1 &
  qemu_pid=$!
}
stop_vm() {
  [[ -n $qemu_pid ]] || return 0
  kill "$qemu_pid" 2>/dev/null || true
  wait "$qemu_pid" 2>/dev/null || true
  qemu_pid=""
}
lines() { wc -l <"$log"; }
wait_for() {  # FROM_LINE REGEX TIMEOUT_S: waits for REGEX in the console after line FROM_LINE
  local from=$1 re=$2 limit=$3 t=0
  while ! tail -n +"$((from + 1))" "$log" | tr -d '\r' | grep -Eq "$re"; do
    [[ -n $qemu_pid ]] && ! kill -0 "$qemu_pid" 2>/dev/null && fail "QEMU exited"
    ((t >= limit)) && fail "no '$re' on the console within $limit s"
    sleep 2; t=$((t + 2))
  done
  tail -n +"$((from + 1))" "$log" | tr -d '\r' | grep -Em1 "$re"
}
vm() {  # TIMEOUT_S COMMAND: runs COMMAND as root on the serial console
  local t=$1; shift
  echo "    vm# $*" >>"$transcript"
  python3 "$here/console.py" "$sock" run "$t" "$@" | tee -a "$transcript"
  return "${PIPESTATUS[0]}"
}
login() { python3 "$here/console.py" "$sock" login "$password" 180 || fail "console login"; }
ready_boot() {  # FROM_LINE WHAT: waits for stratad ready; prints the seconds
  local from=$1 t0=$2 line
  line=$(wait_for "$from" 'STRATA-APPLIANCE-READY' 1500)
  say "$3: $(echo "$line" | sed 's/.*STRATA-APPLIANCE-READY/ready:/') -- $(($(date +%s) - t0)) s after power on/reboot"
  boots+=("$3: $(($(date +%s) - t0)) s ($(echo "$line" | sed -n 's/.*uptime=\([0-9.]*\)s.*/\1/p') s of kernel uptime)")
  # the getty after it
  sleep 3
}

# ---- 1: first boot -----------------------------------------------------------
say "image $image ($fmt), state $state"
say "host ports on 127.0.0.1: iSCSI $p_iscsi, API $p_api, HTTPS $p_https"
t0=$(date +%s)
boot_vm
ready_boot 0 "$t0" "first boot"
first_boot_s=$(($(date +%s) - t0))
creds=$(tr -d '\r' <"$log" | sed -n '/STRATA APPLIANCE FIRST BOOT/,/=====$/p')
[[ -n $creds ]] || fail "no credentials on the console"
echo "$creds" | sed -E 's/(root \/ |token: |secret |strata%)([A-Za-z0-9]{4})[A-Za-z0-9]*/\1\2.../' | tee -a "$transcript"
password=$(echo "$creds" | sed -n 's/.*console login: root \/ \([A-Za-z0-9]*\).*/\1/p')
token=$(echo "$creds" | sed -n 's/.*API token: \([A-Za-z0-9]*\).*/\1/p')
fpr=$(echo "$creds" | sed -n 's/.*fingerprint: \([0-9A-F:]*\).*/\1/p')
chap_user=$(echo "$creds" | sed -n 's/.*iSCSI CHAP: user \([^ ]*\) secret \([A-Za-z0-9]*\).*/\1/p')
chap_secret=$(echo "$creds" | sed -n 's/.*iSCSI CHAP: user \([^ ]*\) secret \([A-Za-z0-9]*\).*/\2/p')
target=$(echo "$creds" | sed -n 's/.*iSCSI target: \([^ ]*\) at.*/\1/p')
[[ -n $password && -n $token && -n $fpr && -n $target ]] || fail "credentials incomplete"
$no_disks || [[ -n $chap_secret ]] || fail "no CHAP credentials"
echo "$token" >"$state/token"; chmod 600 "$state/token"

# The certificate, fetched over TLS and trusted only if its fingerprint is the console's.
openssl s_client -connect 127.0.0.1:$p_https -servername localhost </dev/null 2>/dev/null | openssl x509 >"$state/api.crt" \
  || fail "no TLS certificate on 127.0.0.1:$p_https"
got=$(openssl x509 -in "$state/api.crt" -noout -fingerprint -sha256 | cut -d= -f2)
[[ $got == "$fpr" ]] || fail "certificate fingerprint $got is not the console's $fpr"
say "HTTPS certificate fingerprint matches the console's ($fpr)"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$state/api.crt" https://localhost:$p_https/ --resolve localhost:$p_https:127.0.0.1)
say "HTTPS console: GET / -> $code"
[[ $code == 200 ]] || fail "the console did not answer 200"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$state/api.crt" https://127.0.0.1:$p_https/metrics)
say "HTTPS /metrics without the token -> $code"
say "strata controller list (TLS + token):"
"$strata" --api 127.0.0.1:$p_api --tls-ca "$state/api.crt" --token-file "$state/token" controller list | tee -a "$transcript" \
  || fail "strata controller list"
if "$strata" --api 127.0.0.1:$p_api --tls-ca "$state/api.crt" controller list >/dev/null 2>&1; then
  fail "the API answered without the token"
fi
say "without the token: refused (as it must be)"
"$strata" --api 127.0.0.1:$p_api --tls-ca "$state/api.crt" --token-file "$state/token" disk list | tee -a "$transcript"
"$strata" --api 127.0.0.1:$p_api --tls-ca "$state/api.crt" --token-file "$state/token" group list | tee -a "$transcript"
if $no_disks; then
  stop_vm
  say "PASS (no data disks: the embedded default) in $(($(date +%s) - started)) s; transcript $transcript"
  exit 0
fi
url="iscsi://$chap_user%$chap_secret@127.0.0.1:$p_iscsi"
say "iscsi-ls (CHAP): the portal it names is the VM's own address, behind the port forward"
out=$(iscsi-ls "$url" 2>&1) || true
echo "$out" | sed 's/%[A-Za-z0-9]*@/%...@/' | tee -a "$transcript"
grep -q "$target" <<<"$out" || fail "iscsi-ls does not find $target"
lun="$url/$target/0"
iscsi-inq "$lun" 2>&1 | head -8 | tee -a "$transcript" || fail "iscsi-inq on LUN 0"
if iscsi-inq "iscsi://127.0.0.1:$p_iscsi/$target/0" >/dev/null 2>&1; then fail "LUN 0 answered without CHAP"; fi
say "without CHAP: login refused (as it must be)"
say "qemu-io: pattern 0xa5 at 0 and 0x5a at 1 GiB (4 MiB each)"
out=$(qemu-io -f raw -c 'write -P 0xa5 0 4M' -c 'write -P 0x5a 1G 4M' "$lun" 2>&1) || true
echo "$out" | tee -a "$transcript"
[[ $(grep -c '^wrote ' <<<"$out") == 2 ]] || fail "qemu-io write"
check_pattern() {
  local out
  out=$(qemu-io -f raw -r -c 'read -P 0xa5 0 4M' -c 'read -P 0x5a 1G 4M' "$lun" 2>&1) || true
  echo "$out" | tee -a "$transcript"
  [[ $(echo "$out" | grep -c '^read ') == 2 && $out != *"Pattern verification failed"* ]] || fail "the pattern did not read back"
  say "pattern reads back ($1)"
}
check_pattern "first boot"
login
vm 60 strata-system status
vm 60 'lsblk -o NAME,SIZE,ROTA,TYPE,PARTLABEL,MOUNTPOINT'
vm 60 'df -h / /var/lib/strata /boot/efi'
vm 60 'systemctl --no-pager --failed'

# ---- 2: reboot -------------------------------------------------------------------
say "reboot"
from=$(lines); t0=$(date +%s)
python3 "$here/console.py" "$sock" run 5 'systemctl reboot' >/dev/null 2>&1 || true
ready_boot "$from" "$t0" "second boot"
check_pattern "after a reboot"
stop_vm

# ---- 3: A/B upgrade ----------------------------------------------------------------
if [[ -z $upgrade ]]; then
  v1=$(sed -n 's/^version: //p' "${image%.*}.txt" 2>/dev/null || echo 0)
  say "building the upgrade image (version $v1+upgrade)"
  "$here/build-image.sh" -o "$state/upgrade" --version "$v1+upgrade" >"$state/upgrade-build.log" 2>&1 || fail "building the upgrade image"
  upgrade=$(ls "$state"/upgrade/*.raw)
fi
say "upgrade image $upgrade, on a read-only virtual disk (serial strata-upgrade)"
from=$(lines); t0=$(date +%s)
boot_vm -drive if=none,id=up,file="$upgrade",format=raw,readonly=on -device virtio-blk-pci,drive=up,serial=strata-upgrade
ready_boot "$from" "$t0" "boot with the upgrade disk"
login
from=$(lines); t0=$(date +%s)
vm 1800 'time strata-system upgrade /dev/disk/by-id/virtio-strata-upgrade --no-reboot' || fail "strata-system upgrade"
vm 30 'ls /boot/efi/loader/entries/'
python3 "$here/console.py" "$sock" run 5 'systemctl reboot' >/dev/null 2>&1 || true
ready_boot "$from" "$t0" "upgraded boot"
wait_for "$from" 'READY slot=b version=.*\+upgrade' 5 >/dev/null || fail "slot b with the new version did not boot"
sleep 15  # systemd-bless-boot, after boot-complete.target
login
vm 60 strata-system status
vm 60 'ls /boot/efi/loader/entries/; systemctl --no-pager status systemd-bless-boot.service | head -5'
vm 60 'ls /boot/efi/loader/entries/ | grep -qx strata-b.conf' || fail "slot b was not blessed"
say "slot b blessed (strata-b.conf, no counter)"
check_pattern "after the A/B upgrade"

# ---- 4: fallback ---------------------------------------------------------------------
say "fallback: slot a upgraded with 1 try, then its root file system corrupted"
vm 1800 'strata-system upgrade /dev/disk/by-id/virtio-strata-upgrade --tries 1 --no-reboot' || fail "second upgrade"
vm 60 'p=$(sed -n "s/.*root=PARTUUID=\([^ ]*\).*/\1/p" /boot/efi/loader/entries/strata-a+1.conf); dd if=/dev/zero of=/dev/disk/by-partuuid/$p bs=1M count=8 conv=fsync status=none; echo corrupted slot a: $p'
from=$(lines); t0=$(date +%s)
python3 "$here/console.py" "$sock" run 5 'systemctl reboot' >/dev/null 2>&1 || true
ready_boot "$from" "$t0" "boot after the failed slot"
tail -n +"$((from + 1))" "$log" | tr -d '\r' | grep -E 'Rebooting automatically|Failed to mount|panic|ALERT|Gave up' | head -5 | sed 's/^/    console: /' | tee -a "$transcript"
wait_for "$from" 'READY slot=b ' 5 >/dev/null || fail "did not fall back to slot b"
login
vm 60 strata-system status
vm 60 'ls /boot/efi/loader/entries/ | grep -q "^strata-a+0-1.conf$"' || fail "slot a's entry is not marked out of tries"
say "fell back to slot b; slot a's entry is out of tries"
check_pattern "after the fallback"
stop_vm
say "time to STRATA-APPLIANCE-READY (stratad ready, API answering), TCG, 2 vCPUs:"
for b in "${boots[@]}"; do say "  $b"; done
say "PASS in $(($(date +%s) - started)) s; transcript $transcript"
