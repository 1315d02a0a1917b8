#!/usr/bin/env bash
# A single-node Ceph cluster from Debian 12's packages (Ceph 16, Pacific),
# on loopback only, for the Ceph capacity tier's tests and benchmarks
# (docs/ceph-tier.md): one monitor, one manager and N OSDs on BlueStore
# over sparse files, cephx on, pools of size 1. Everything lives in DIR:
# the configuration, keyrings, the daemons' data, logs and admin sockets;
# nothing is written to /etc/ceph or /var/lib/ceph, and the daemons are
# plain processes (no systemd units), so several clusters can run at once
# on different ports.
#
#   single-node.sh start DIR [--port P] [--osds N] [--osd-size SIZE]
#   single-node.sh restart-clean DIR [...]   destroy, then start (tests)
#   single-node.sh stop DIR          stops the daemons (DIR stays)
#   single-node.sh destroy DIR       stops them and removes DIR
#   single-node.sh status DIR        `ceph status`
#   single-node.sh osd-stop DIR ID   kills OSD ID (SIGKILL: a crash) and waits until it is down
#   single-node.sh osd-start DIR ID  starts OSD ID again and waits until it is up
#
# start prints the shell variables a client needs (CEPH_CONF, CEPH_KEYRING,
# CEPH_MON as mon_host takes it, CEPH_DIR) and writes them to DIR/env. The monitor listens on
# 127.0.0.1:P (msgr2; default 13300), the OSDs and the manager on ports
# the monitor hands out, all on 127.0.0.1. --osd-size is each OSD's
# BlueStore file (sparse; default 20G). Exit 77 when Ceph is not installed
# (tools/install-deps.sh installs it).
set -euo pipefail

usage() { sed -n 2,22p "$0" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
verb=$1 dir=$2; shift 2
osd_id=""
[[ $verb == osd-stop || $verb == osd-start ]] && { [[ $# -ge 1 ]] || usage; osd_id=$1; shift; }
port=13300 osds=1 osd_size=20G
while (($#)); do
  case "$1" in
    --port) port=$2; shift 2 ;;
    --osds) osds=$2; shift 2 ;;
    --osd-size) osd_size=$2; shift 2 ;;
    *) usage ;;
  esac
done
for t in ceph-mon ceph-mgr ceph-osd ceph ceph-authtool monmaptool; do
  command -v "$t" >/dev/null || { echo "single-node: $t is not installed (tools/install-deps.sh: ceph-mon ceph-mgr ceph-osd ceph-common)" >&2; exit 77; }
done

stop_daemons() {
  local pidfile pid
  for pidfile in "$dir"/run/*.pid; do
    [[ -f $pidfile ]] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
  done
  # Up to 30 s for a clean stop, then SIGKILL.
  for _ in $(seq 60); do
    local alive=false
    for pidfile in "$dir"/run/*.pid; do
      [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null && alive=true
    done
    $alive || break
    sleep 0.5
  done
  for pidfile in "$dir"/run/*.pid; do
    [[ -f $pidfile ]] && kill -9 "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

case "$verb" in
  stop) [[ -d $dir ]] && stop_daemons; exit 0 ;;
  destroy) [[ -d $dir ]] && { stop_daemons; rm -rf --one-file-system "$dir"; }; exit 0 ;;
  status) exec ceph -c "$dir/ceph.conf" status ;;
  restart-clean) [[ -d $dir ]] && { stop_daemons; rm -rf --one-file-system "$dir"; } ;;
  osd-stop)
    pidfile=$dir/run/osd.$osd_id.pid
    [[ -f $pidfile ]] && kill -9 "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
    # Tell the monitor at once (it would notice by itself in about 20 s).
    timeout 30 ceph -c "$dir/ceph.conf" osd down "$osd_id" >/dev/null 2>&1 || true
    exit 0 ;;
  osd-start)
    ceph-osd -c "$dir/ceph.conf" -i "$osd_id" 2>>"$dir/log/osd.$osd_id.stderr"
    for _ in $(seq 120); do
      timeout 10 ceph -c "$dir/ceph.conf" osd dump -f json 2>/dev/null |
        python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if any(o["osd"]=='"$osd_id"' and o["up"] for o in d["osds"]) else 1)' && exit 0
      sleep 0.5
    done
    echo "single-node: osd.$osd_id did not come up ($dir/log/osd.$osd_id.log)" >&2; exit 1 ;;
  start) ;;
  *) usage ;;
esac

[[ ! -e $dir/ceph.conf ]] || { echo "single-node: $dir already holds a cluster (stop/destroy it, or start the daemons with restart)" >&2; exit 2; }
mkdir -p "$dir"/{run,log}
dir=$(cd "$dir" && pwd)
started=$SECONDS
fsid=$(cat /proc/sys/kernel/random/uuid)
conf=$dir/ceph.conf
ceph_() { timeout 60 ceph -c "$conf" "$@"; }

# Small memory targets: a test cluster beside the array on a small machine.
cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$port]
public network = 127.0.0.0/8
ms bind ipv4 = true
ms bind ipv6 = false
ms bind msgr1 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = $dir/\$name.keyring
run dir = $dir/run
admin socket = $dir/run/\$name.asok
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
mon cluster log file = $dir/log/cluster.log
# One node, N OSDs: replicas across OSDs, never across hosts.
osd pool default size = 1
osd pool default min size = 1
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd pool default pg autoscale mode = off
osd pool default pg num = 32
osd pool default pgp num = 32

[mon]
mon data = $dir/mon.\$id
mon data avail warn = 2
mon data avail crit = 1

[mgr]
mgr data = $dir/mgr.\$id

[osd]
osd data = $dir/osd.\$id
osd objectstore = bluestore
bluestore block create = true
bluestore block size = $(numfmt --from=iec "$osd_size")
bluestore block db create = false
bluestore block wal create = false
osd memory target = 939524096
bluestore cache autotune = false
bluestore cache size = 134217728
osd op num shards = 2
osd op num threads per shard = 1
EOF

# Keyrings: the monitor's, and the admin's (the tests' client).
ceph-authtool --create-keyring "$dir/mon.a.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool --create-keyring "$dir/client.admin.keyring" --gen-key -n client.admin \
  --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
ceph-authtool "$dir/mon.a.keyring" --import-keyring "$dir/client.admin.keyring" >/dev/null
monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" "$dir/monmap" >/dev/null
ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/mon.a.keyring" >"$dir/log/mkfs.log" 2>&1
ceph-mon -c "$conf" -i a
for _ in $(seq 60); do ceph_ -s >/dev/null 2>&1 && break; sleep 0.5; done
ceph_ -s >/dev/null || { echo "single-node: the monitor did not answer on 127.0.0.1:$port ($dir/log/mon.a.log)" >&2; exit 1; }

# The manager: health, PG statistics, `ceph df`. Only the modules that
# always run; no dashboard.
mkdir -p "$dir/mgr.x"
ceph_ auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' >"$dir/mgr.x.keyring"
ceph-mgr -c "$conf" -i x

for i in $(seq 0 $((osds - 1))); do
  uuid=$(cat /proc/sys/kernel/random/uuid)
  id=$(ceph_ osd new "$uuid")
  mkdir -p "$dir/osd.$id"
  ceph_ auth get-or-create "osd.$id" mon 'allow profile osd' mgr 'allow profile osd' osd 'allow *' >"$dir/osd.$id.keyring"
  ceph-osd -c "$conf" -i "$id" --mkfs --osd-uuid "$uuid" >>"$dir/log/mkfs.log" 2>&1 ||
    { tail -20 "$dir/log/mkfs.log" >&2; echo "single-node: osd.$id mkfs failed" >&2; exit 1; }
  ceph-osd -c "$conf" -i "$id" 2>>"$dir/log/osd.$id.stderr"
done
for _ in $(seq 240); do
  [[ $(ceph_ osd stat -f json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["num_up_osds"])' 2>/dev/null) == "$osds" ]] && break
  sleep 0.5
done
up=$(ceph_ osd stat -f json | python3 -c 'import json,sys; print(json.load(sys.stdin)["num_up_osds"])')
[[ $up == "$osds" ]] || { echo "single-node: $up of $osds OSDs up ($dir/log/)" >&2; exit 1; }

cat >"$dir/env" <<EOF
CEPH_CONF=$conf
CEPH_KEYRING=$dir/client.admin.keyring
CEPH_MON=[v2:127.0.0.1:$port]
CEPH_DIR=$dir
EOF
cat "$dir/env"
echo "single-node: Ceph $(ceph-mon --version | awk '{print $3}') up in $((SECONDS - started)) s: mon 127.0.0.1:$port, $osds OSD(s) of $osd_size in $dir" >&2
