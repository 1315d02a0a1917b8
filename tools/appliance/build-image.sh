#!/usr/bin/env bash
# Builds the Strata appliance's bootable GPT disk image (raw + qcow2) from
# Debian 12's archive and the Strata packages, as root, offline from any
# running system: no KVM, no loop devices, no mounts. The root file system
# is made by mmdebstrap in a directory, turned into ext4 with `mke2fs -d`,
# the EFI system partition is a FAT file filled with mtools, and sfdisk
# writes the GPT; the partitions are put in place with dd at their offsets.
#
# Layout (docs/appliance.md):
#   1 esp          FAT32: systemd-boot, each slot's kernel + initrd, loader entries
#   2 root-a       ext4: the root file system (slot a, booted first)
#   3 root-b       ext4 of the same size, empty (slot b: the next upgrade)
#   4 strata-data  ext4, mounted at /var/lib/strata: everything persistent;
#                  small here, grown to the end of the boot disk at first boot
#
# Usage: build-image.sh -o OUTDIR [options]   (-h for them)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

usage() {
  cat <<EOF
Usage: $0 -o OUTDIR [options]
  -o OUTDIR          where strata-appliance-VERSION.raw and .qcow2 go
  --version V        the image's version (default: the stratad package's, else CMakeLists.txt's)
  --debs DIR         the Strata .debs to install (default $repo/build/deb, when it holds any)
  --dev-binaries DIR no .debs: copy stratad and strata from this build tree
                     (default $repo/build/release when there are no .debs)
  --root-size SIZE   each root slot (default 768M; the next image's root must fit it)
  --esp-size SIZE    the EFI system partition (default 128M)
  --data-size SIZE   the data partition in the image (default 64M; grown at first boot)
  --mirror URL       Debian mirror (default http://deb.debian.org/debian)
  --keep-work        keep the work directory (under /var/tmp/strata-appliance-build-*)
EOF
}

out="" version="" debs="" dev="" root_size=768M esp_size=128M data_size=64M
mirror=http://deb.debian.org/debian keep=false
while (($#)); do
  case "$1" in
    -o) out=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --debs) debs=$2; shift 2 ;;
    --dev-binaries) dev=$2; shift 2 ;;
    --root-size) root_size=$2; shift 2 ;;
    --esp-size) esp_size=$2; shift 2 ;;
    --data-size) data_size=$2; shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    --keep-work) keep=true; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[[ -n $out ]] || { usage >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "build-image: run as root (mmdebstrap's root mode, device nodes in the root)" >&2; exit 2; }
for tool in mmdebstrap mke2fs mkfs.fat mcopy mmd sfdisk qemu-img; do
  command -v "$tool" >/dev/null || { echo "build-image: $tool missing: tools/install-deps.sh --image" >&2; exit 2; }
done
sdboot=/usr/lib/systemd/boot/efi/systemd-bootx64.efi
[[ -f $sdboot ]] || { echo "build-image: $sdboot missing (package systemd-boot-efi): tools/install-deps.sh --image" >&2; exit 2; }

if [[ -z $debs && -z $dev ]]; then
  if compgen -G "$repo/build/deb/stratad_*.deb" >/dev/null; then debs=$repo/build/deb; else dev=$repo/build/release; fi
fi
# The version: the stratad package's upstream version, else the project's (CMakeLists.txt).
if [[ -z $version && -n $debs ]]; then
  d=$(ls "$debs"/stratad_*.deb 2>/dev/null | sort -V | tail -1)
  [[ -n $d ]] && version=$(dpkg-deb -f "$d" Version | sed 's/-[^-]*$//')
fi
[[ -n $version ]] || version=$(sed -n 's/^project(strata VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
[[ -n $version ]] || { echo "build-image: no version: pass --version" >&2; exit 2; }

bytes() {  # SIZE with K/M/G suffix -> bytes
  numfmt --from=iec "${1%iB}"
}
mib=$((1024 * 1024))
root_bytes=$(bytes "$root_size") esp_bytes=$(bytes "$esp_size") data_bytes=$(bytes "$data_size")
for b in $root_bytes $esp_bytes $data_bytes; do ((b % mib == 0)) || { echo "build-image: sizes must be whole MiB" >&2; exit 2; }; done

started=$(date +%s)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /var/tmp/strata-appliance-build-XXXXXX)
# --one-file-system: never into a mount mmdebstrap may have left (proc, sys) if stopped
cleanup() { $keep || rm -rf --one-file-system "$work"; }
trap cleanup EXIT
root=$work/root
say() { echo "build-image: [$(($(date +%s) - started)) s] $*"; }

# ---- the packages ----------------------------------------------------------
# A minimal set: init, the kernel and its initramfs, networkd (in systemd),
# systemd-boot's tools (bootctl, systemd-bless-boot for boot counting), what
# first boot and the upgrade run (openssl, lsblk/sfdisk, mtools, e2fsprogs),
# and a console login (login, passwd). No ssh, no shell extras.
include=(
  systemd systemd-sysv udev dbus systemd-boot linux-image-amd64 initramfs-tools zstd
  login passwd mount util-linux fdisk e2fsprogs mtools openssl iproute2 kmod procps
)
strata_pkgs=()
if [[ -n $debs ]]; then
  # stratad and the CLI; strata-appliance if packaged (else its files are copied below)
  for d in "$debs"/*.deb; do
    case "$(basename "$d")" in
      *-dbgsym_*|strata-tools_*) ;;  # benchmarks and debug symbols stay off the appliance
      *) strata_pkgs+=("$d") ;;
    esac
  done
  ((${#strata_pkgs[@]})) || { echo "build-image: no .deb in $debs" >&2; exit 2; }
  include+=("${strata_pkgs[@]}")
else
  # Development: the binaries of a build tree and the Debian packages of the
  # libraries they link (found on this Debian 12 host with dpkg -S).
  for b in controller/stratad tools/strata; do
    [[ -x $dev/$b ]] || { echo "build-image: no $dev/$b (build it, or give --debs)" >&2; exit 2; }
  done
  mapfile -t libpkgs < <(for b in controller/stratad tools/strata; do
      ldd "$dev/$b" | awk '$3 ~ /^\// {print $3}'
    done | sort -u | while read -r lib; do
      real=$(readlink -f "$lib")
      dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || true
    done | cut -d: -f1 | sort -u)
  include+=("${libpkgs[@]}")
fi
has_appliance_deb=false
for d in "${strata_pkgs[@]}"; do [[ $(basename "$d") == strata-appliance_* ]] && has_appliance_deb=true; done

# Documentation, translations and the kernel's drivers an array server has no
# use for (graphics, sound, wireless, media, ...) are never unpacked: the
# root slot stays small. Copyright files are kept.
dpkgopts=()
# Files only (a pattern on directories trips dpkg on nested ones); dpkg's
# `*` spans directories.
for p in '/usr/share/doc/*/*' '/usr/share/man/*.gz' '/usr/share/info/*.gz' '/usr/share/locale/*.mo' '/usr/share/lintian/*'; do
  dpkgopts+=("--dpkgopt=path-exclude=$p")
done
dpkgopts+=("--dpkgopt=path-include=/usr/share/doc/*/copyright")
for m in drivers/gpu drivers/media drivers/net/wireless drivers/staging drivers/infiniband drivers/bluetooth \
         drivers/iio drivers/input/joystick drivers/input/touchscreen drivers/isdn drivers/net/can drivers/video/fbdev \
         drivers/hwmon drivers/mmc drivers/usb/gadget drivers/thunderbolt sound net/wireless net/mac80211 net/bluetooth \
         fs/nfs fs/nfsd fs/ocfs2 fs/gfs2 fs/ceph fs/smb fs/ntfs3 fs/btrfs fs/xfs fs/jfs fs/reiserfs fs/nilfs2 fs/f2fs fs/ubifs; do
  dpkgopts+=("--dpkgopt=path-exclude=/lib/modules/*/kernel/$m/*.ko" "--dpkgopt=path-exclude=/usr/lib/modules/*/kernel/$m/*.ko")
done

say "mmdebstrap: Debian 12 + ${#include[@]} packages (version $version)"
hooks=()
# Local .debs are installed by a dpkg inside the chroot: mmdebstrap's own
# hook bind-mounts their directory there (and unmounts it after).
[[ -n $debs ]] && hooks+=(--hook-dir=/usr/share/mmdebstrap/hooks/file-mirror-automount)
mmdebstrap --variant=apt --mode=root --format=directory --quiet \
  "${dpkgopts[@]}" "${hooks[@]}" \
  --include="$(IFS=,; echo "${include[*]}")" \
  --setup-hook='mkdir -p "$1/etc/initramfs-tools/conf.d"; printf "%s\n" "COMPRESS=zstd" "MODULES=most" > "$1/etc/initramfs-tools/conf.d/strata-appliance"' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb' \
  bookworm "$root" "$mirror" >"$work/mmdebstrap.log" 2>&1 || { tail -30 "$work/mmdebstrap.log" >&2; echo "build-image: mmdebstrap failed" >&2; exit 1; }

# The kernel's modules xz-compressed (kmod reads them so): about 130 MiB
# less in each root slot. The initramfs was made before, from the same modules.
kver=$(ls "$root"/usr/lib/modules | sort -V | tail -1)
find "$root/usr/lib/modules/$kver" -name '*.ko' -print0 | xargs -0 -P "$(nproc)" -n 64 xz --check=crc32 -6
depmod -b "$root" "$kver"

# ---- the appliance's own files ----------------------------------------------
say "appliance files"
install -d "$root/usr/lib/strata-appliance" "$root/usr/sbin" "$root/etc/systemd/system/stratad.service.d" \
  "$root/etc/systemd/network" "$root/usr/lib/systemd/system" "$root/usr/lib/systemd/system-generators"
if ! $has_appliance_deb; then
  install -m 0755 "$here/strata-system" "$root/usr/sbin/strata-system"
  install -m 0755 "$here/strata-firstboot" "$root/usr/lib/strata-appliance/strata-firstboot"
  install -m 0755 "$here/strata-appliance-generator" "$root/usr/lib/systemd/system-generators/strata-appliance-generator"
  install -m 0644 "$here"/units/*.service "$root/usr/lib/systemd/system/"
  install -m 0644 "$here/stratad-appliance.conf" "$root/etc/systemd/system/stratad.service.d/appliance.conf"
  install -m 0644 "$here/80-strata-dhcp.network" "$root/etc/systemd/network/80-strata-dhcp.network"
fi
if [[ -n $dev ]]; then
  install -m 0755 "$dev/controller/stratad" "$root/usr/sbin/stratad"
  install -m 0755 "$dev/tools/strata" "$root/usr/bin/strata"
  install -m 0644 "$here/dev/stratad.service" "$root/usr/lib/systemd/system/stratad.service"
  install -d "$root/etc/strata"
  install -m 0644 "$repo/controller/strata.example.toml" "$root/etc/strata/strata.toml"
fi
echo "$version" >"$root/etc/strata-appliance-version"
echo strata >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tstrata\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
# A fresh machine id at every boot of a slot that has none: two appliances
# made from one image are two machines (DHCP client ids come from it).
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
# The root password is set at first boot (and kept on strata-data): locked here.
chroot "$root" passwd -l root >/dev/null
chroot "$root" systemctl enable systemd-networkd.service strata-firstboot.service strata-boot-check.service \
  stratad.service >/dev/null 2>&1
chroot "$root" systemctl disable apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer >/dev/null 2>&1 || true
# Mounts come from the generator (the boot entry names the partitions):
# the same root file system serves in either slot and on any disk.
printf '# The ESP (/boot/efi) and strata-data (/var/lib/strata) are mounted by\n# strata-appliance-generator from the boot entry (strata.esp=, strata.data=).\n' >"$root/etc/fstab"
install -d "$root/boot/efi" "$root/var/lib/strata"

# The kernel and initramfs boot from the ESP: the root keeps none (an
# upgrade takes them from the image's ESP).
kernel=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)
initrd=$(ls "$root"/boot/initrd.img-* | sort -V | tail -1)
mv "$kernel" "$work/vmlinuz"
mv "$initrd" "$work/initrd.img"
rm -f "$root"/boot/vmlinuz* "$root"/boot/initrd.img* "$root"/vmlinuz* "$root"/initrd.img*
root_used=$(du -sxb "$root" | cut -f1)
say "root file system: $((root_used / mib)) MiB used; kernel $kver, initrd $(($(stat -c %s "$work/initrd.img") / mib)) MiB"

# ---- partitions as files -----------------------------------------------------
uuid() { cat /proc/sys/kernel/random/uuid; }
esp_uuid=$(uuid) roota_uuid=$(uuid) rootb_uuid=$(uuid) data_uuid=$(uuid) disk_uuid=$(uuid)
cmdline="root=PARTUUID=$roota_uuid rw console=tty0 console=ttyS0,115200 panic=10 quiet strata.slot=a strata.esp=PARTUUID=$esp_uuid strata.data=PARTUUID=$data_uuid"

say "root-a: ext4 $root_size (mke2fs -d)"
mke2fs -q -t ext4 -L strata-root -d "$root" -E root_owner=0:0 -m 0 "$work/root-a.img" "$((root_bytes / 1024))K" >/dev/null
say "strata-data: ext4 $data_size"
mkdir -p "$work/data"
mke2fs -q -t ext4 -L strata-data -d "$work/data" -m 0 "$work/data.img" "$((data_bytes / 1024))K" >/dev/null

say "esp: FAT32 $esp_size (mtools)"
truncate -s "$esp_bytes" "$work/esp.img"
mkfs.fat -F 32 -n STRATA-ESP "$work/esp.img" >/dev/null
mmd -i "$work/esp.img" ::/EFI ::/EFI/BOOT ::/EFI/systemd ::/loader ::/loader/entries ::/strata ::/strata/a ::/strata/b
# The removable-media path boots without any firmware boot entry (a new disk, OVMF's empty NVRAM).
mcopy -i "$work/esp.img" "$sdboot" ::/EFI/BOOT/BOOTX64.EFI
mcopy -i "$work/esp.img" "$sdboot" ::/EFI/systemd/systemd-bootx64.efi
mcopy -i "$work/esp.img" "$work/vmlinuz" ::/strata/a/vmlinuz
mcopy -i "$work/esp.img" "$work/initrd.img" ::/strata/a/initrd.img
echo "$version" >"$work/version"
mcopy -i "$work/esp.img" "$work/version" ::/strata/a/version
# No `default`: systemd-boot boots the first entry in its order, which is the
# highest `version` (the newest upgrade) among entries with tries left; an
# entry out of tries sorts last. That ordering is the fallback.
printf 'timeout 0\neditor no\nconsole-mode keep\n' >"$work/loader.conf"
mcopy -i "$work/esp.img" "$work/loader.conf" ::/loader/loader.conf
cat >"$work/strata-a.conf" <<EOF
title Strata appliance $version (slot a)
sort-key strata
version 1
linux /strata/a/vmlinuz
initrd /strata/a/initrd.img
options $cmdline
EOF
mcopy -i "$work/esp.img" "$work/strata-a.conf" ::/loader/entries/strata-a.conf

# ---- the disk ----------------------------------------------------------------
# 1 MiB alignment; the root slots equal; 1 MiB at the end for the backup GPT.
esp_start=$mib
roota_start=$((esp_start + esp_bytes))
rootb_start=$((roota_start + root_bytes))
data_start=$((rootb_start + root_bytes))
disk_bytes=$((data_start + data_bytes + mib))
name=strata-appliance-$version
raw=$out/$name.raw
rm -f "$raw" "$out/$name.qcow2"
truncate -s "$disk_bytes" "$raw"
say "GPT (sfdisk) on $((disk_bytes / mib)) MiB"
sfdisk -q --no-reread --no-tell-kernel "$raw" <<EOF
label: gpt
label-id: $disk_uuid
first-lba: 2048
start=$((esp_start / 512)), size=$((esp_bytes / 512)), type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, uuid=$esp_uuid, name=esp
start=$((roota_start / 512)), size=$((root_bytes / 512)), type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, uuid=$roota_uuid, name=root-a
start=$((rootb_start / 512)), size=$((root_bytes / 512)), type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, uuid=$rootb_uuid, name=root-b
start=$((data_start / 512)), size=$((data_bytes / 512)), type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, uuid=$data_uuid, name=strata-data
EOF
put() {  # FILE OFFSET: a partition's contents in place (sparse stays sparse)
  dd if="$1" of="$raw" bs=1M seek="$(($2 / mib))" conv=notrunc,sparse status=none
}
put "$work/esp.img" "$esp_start"
put "$work/root-a.img" "$roota_start"
put "$work/data.img" "$data_start"
# root-b stays zeros: no slot entry names it until an upgrade writes it.

say "qcow2"
qemu-img convert -c -f raw -O qcow2 "$raw" "$out/$name.qcow2"
elapsed=$(($(date +%s) - started))
cat >"$out/$name.txt" <<EOF
image: $name
version: $version
built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in ${elapsed} s
kernel: $kver
root file system used: $((root_used / mib)) MiB of a $root_size slot
raw: $(du -b "$raw" | cut -f1) bytes apparent ($((disk_bytes / mib)) MiB), $(du -k "$raw" | cut -f1) KiB allocated
qcow2: $(du -b "$out/$name.qcow2" | cut -f1) bytes
partitions: esp $esp_size, root-a $root_size, root-b $root_size, strata-data $data_size
strata: $(if [[ -n $debs ]]; then printf '%s ' "${strata_pkgs[@]##*/}"; else echo "binaries of $dev (no .debs)"; fi)
EOF
say "done: $raw, $out/$name.qcow2"
cat "$out/$name.txt"
