#!/usr/bin/env bash
# Installs exactly the Debian 12 packages Strata needs that are missing.
# Idempotent: a second run installs nothing and does not touch the network.
# Every dependency comes from Debian's archive; nothing is downloaded from
# anywhere else and nothing is vendored.
set -euo pipefail

packages=(
  # toolchain
  g++ cmake ninja-build pkg-config
  ccache             # the compiler cache both presets build through (README: "The compiler cache")
  clang-format       # .ci/run fails on unformatted sources (tools/check-format.sh)
  # the fuzz targets (tests/fuzz/run.sh): clang with libFuzzer, and libc++ for its <expected>
  clang-16 libclang-rt-16-dev libc++-16-dev libc++abi-16-dev
  # libraries
  libboost1.81-dev   # Asio, Beast
  liburing-dev       # the file device's io_uring rings
  librocksdb-dev     # metadata (tiering, controller)
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libisal-dev        # RAID-6 P+Q
  libssl-dev         # libcrypto: the MD5/SHA digests and random challenges of iSCSI CHAP; libssl: the HTTP side's HTTPS
  zlib1g-dev         # strata heat map --png: its PNG encoder's deflate
  libfmt-dev
  nlohmann-json3-dev # reading fio's JSON in the benchmark
  libtomlplusplus-dev # stratad's configuration file (TOML, controller/config_file.cc)
  libcli11-dev       # the command lines of strata, stratad and the tools
  libsystemd-dev     # sd_notify: stratad's readiness and watchdog under systemd
  librbd-dev librados-dev  # the Ceph capacity tier's device (raid/device/rbd_device.h)
  catch2             # 2.13, header-only
  # benchmark peers and test clients
  fio
  libiscsi-bin       # iscsi-test-cu, iscsi-inq, iscsi-perf: the iSCSI target's real clients
  libiscsi-dev       # strata-torture (tools/torture/): the crash torture's initiator, libiscsi's async API
  qemu-utils qemu-block-extra  # qemu-io/qemu-img with iscsi:// URLs: a second real initiator, and sequential writes in the benchmark
  tgt                # tgtd: the iSCSI target to beat
  ceph-mon ceph-mgr ceph-osd ceph-common  # a single-node Ceph for the Ceph tier's tests (tools/ceph/single-node.sh)
  prometheus         # scrapes stratad's /metrics in the metrics test
  chromium           # the web console's tests drive it (with Playwright's
                     # playwright-core from the npm registry: no browser download)
  python3            # protocol tests that speak raw PDUs
  openssl            # the management API tests make a TLS certificate
)
# --pgbench: also what tools/pgbench/ needs (a real database on a Strata
# LUN): PostgreSQL with pgbench, and qemu-storage-daemon (its FUSE export of
# the LUN) with fuse3. Not needed to build or test.
# --seedbench: what tools/seedbench/ needs besides: qemu-storage-daemon
# (its NBD export of a LUN, for fio's NBD engine), PostgreSQL (the TPC-C-like
# experiment) and matplotlib (the plots); and ghz, as --apibench.
# --image: what tools/appliance/ needs to build the appliance's disk image
# (mmdebstrap, mtools, dosfstools, fdisk, e2fsprogs; systemd-boot-efi's EFI
# binary) and to boot it (QEMU, OVMF's UEFI firmware).
# --package: what tools/build-deb.sh needs to build the Debian packages
# (debhelper's dh with dh_installsystemd, dpkg-buildpackage, help2man for
# the manual pages) and check them (lintian); systemd for `systemd-analyze
# security` on the unit, python3-seccomp for tools/unit-sandbox-check.py.
# --apibench: ghz, the gRPC load generator of tools/apibench/ and
# tools/stratadbench/ (no test needs it: a minute of compiling in CI saved).
want_ghz=false
case "${1:-}" in
  --pgbench) packages+=(postgresql qemu-system-common fuse3) ;;
  --seedbench) packages+=(postgresql qemu-system-common fuse3 python3-matplotlib); want_ghz=true ;;
  --apibench) want_ghz=true ;;
  --package) packages+=(debhelper dpkg-dev fakeroot lintian help2man systemd python3-seccomp) ;;
  --image) packages+=(mmdebstrap systemd-boot-efi mtools dosfstools fdisk e2fsprogs qemu-system-x86 qemu-utils ovmf) ;;
esac

# Node.js and npm, Playwright's runtime: Debian's, unless a Node.js is here already.
command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

# grpcurl, which the end-to-end tests call the management API with (through
# server reflection), and ghz (--apibench), which the API benchmarks load it
# with: Debian 12 packages neither, so they come from the Go module proxy when a Go
# toolchain is here; else what needs them skips, saying so.
install_go_tool() {  # NAME MODULE@VERSION
  command -v "$1" >/dev/null && return 0
  command -v go >/dev/null || { echo "install-deps: no Go toolchain: $1 not installed (what needs it skips)"; return 0; }
  if GOBIN=/usr/local/bin timeout 600 go install "$2" >/dev/null 2>&1; then
    echo "install-deps: installed $1 from the Go module proxy"
  else
    echo "install-deps: $1 could not be installed from the Go module proxy (what needs it skips)"
  fi
}
install_grpcurl() {
  install_go_tool grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.1
  if $want_ghz; then install_go_tool ghz github.com/bojand/ghz/cmd/ghz@v0.120.0; fi
}

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  install_grpcurl
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
install_grpcurl
