#!/usr/bin/env bash
# stratad started from a configuration file (controller/strata.example.toml
# documents it), with real processes: the file's array is built on an empty
# state directory (simulated drives, a drive at a path of its own, groups,
# a pool, a volume, a host and its mapping), SendTargets names the
# advertised portal, a restart re-assembles the array from its superblocks
# and ignores the file's build sections, and a bad file stops stratad with
# FILE:LINE:COLUMN and the reason.
#   stratad_config_test.sh PATH/TO/stratad PATH/TO/strata
set -uo pipefail
source "$(dirname "$0")/lib.sh"
stratad=$1
cli=$2
for tool in iscsi-ls iscsi-inq qemu-io; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is missing (tools/install-deps.sh installs libiscsi-bin, qemu-utils)"; exit 77; }
done
dir=$(mktemp -d)
pid=
trap '[[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 12000))  # below Linux's ephemeral ports (32768 and up), which outgoing connections take
api=127.0.0.1:$((port + 2))
target=iqn.2026-11.test:cfg
initiator=iqn.2026-11.test:db1
s() { "$cli" --api "$api" "$@"; }
truncate -s 1G "$dir/raw-hdd.img"  # a drive at a path of its own, used as it is

cat >"$dir/strata.toml" <<EOF
[daemon]
state_dir = "array"   # relative: from this file's directory
iscsi_listen = "127.0.0.1:$port"
iscsi_portals = ["192.0.2.10:3260"]
target_name = "$target"
grpc_listen = "$api"

[[drive]]
name = "hdd-00"
kind = "hdd"
size = "1G"
[[drive]]
name = "hdd-01"
kind = "hdd"
size = "1G"
[[drive]]
name = "hdd-02"
kind = "hdd"
size = "1G"
[[drive]]
name = "hdd-03"
kind = "hdd"
path = "raw-hdd.img"
[[drive]]
name = "ssd-00"
kind = "ssd"
size = "512M"
[[drive]]
name = "ssd-01"
kind = "ssd"
size = "512M"

[[group]]
name = "g1"
kind = "raid6"
drives = ["hdd-00", "hdd-01", "hdd-02", "hdd-03"]
[[group]]
name = "g2"
kind = "raid1"
drives = ["ssd-00", "ssd-01"]

[pool]
groups = ["g1", "g2"]

[[volume]]
name = "db"
size = "1G"
placement = "capacity"

[[host]]
name = "db1"
iqns = ["$initiator"]

[[mapping]]
volume = "db"
host = "db1"
lun = 3
EOF

start() {
  "$stratad" --config "$dir/strata.toml" >"$dir/$1.out" 2>"$dir/$1.err" &
  pid=$!
  wait_ready "$dir/$1.out" "$dir/$1.err"
}

start first
check "the first start builds the file's array in its state_dir" \
  grep -q "building the array of $dir/strata.toml in $dir/array" "$dir/first.err"
check "the groups are the file's: g1 RAID6 of 4 disks, g2 RAID1, no read cache" bash -c \
  "s() { '$cli' --api $api \"\$@\"; }; s group list | grep -q '^groups/g1 *RAID6 .*disks/hdd-00,disks/hdd-01,disks/hdd-02,disks/hdd-03\$' &&
   s group list | grep -q '^groups/g2 *RAID1 ' && [[ \$(s group list | wc -l) -eq 3 ]]"
check "hdd-03 is the file at its path, with no timing model" bash -c \
  "'$cli' --api $api --json disk show hdd-03 | grep -q '\"path\":\"$dir/raw-hdd.img\",\"timing_model\":\"\"'"
check "hdd-00 is simulated: a file in the state directory behind the HDD model" bash -c \
  "'$cli' --api $api --json disk show hdd-00 | grep -q '\"path\":\"$dir/array/shelf/hdd-00.img\",\"timing_model\":\"nl_sas_7k2\"'"
check "the volume is mapped to db1 as LUN 3 (mappings/m1)" bash -c "'$cli' --api $api map list | grep -q '^mappings/m1 *pools/p1/volumes/db *hosts/db1 *3\$'"
check "strata controller show: controllers/a, ACTIVE, owning p1, serving the file's portal and target from its state_dir" bash -c \
  "'$cli' --api $api --json controller show | grep -q '\"name\":\"controllers/a\",\"state\":\"CONTROLLER_ACTIVE\",.*\"pools\":\[\"pools/p1\"\],\"iscsi_portal\":\"127.0.0.1:$port\",\"target_name\":\"$target\",.*\"state_dir\":\"$dir/array\"'"
"$cli" --api "$api" controller show b >/dev/null 2>"$dir/cli.err"
check "strata controller show b: NOT_FOUND, exit 1" bash -c "[[ $? -eq 1 ]] && grep -q 'NOT_FOUND: name: controllers/b does not exist' '$dir/cli.err'"
check "SendTargets names the advertised portal" bash -c \
  "iscsi-ls -i $initiator iscsi://127.0.0.1:$port | grep -q 'Target:$target Portal:192.0.2.10:3260'"
check "db1 sees LUN 3" bash -c "iscsi-inq -i $initiator iscsi://127.0.0.1:$port/$target/3 | grep -q 'Peripheral Device Type:DIRECT_ACCESS'"
check "another initiator does not" bash -c "! iscsi-inq -i iqn.2026-11.test:other iscsi://127.0.0.1:$port/$target/3 >/dev/null 2>&1"
url="iscsi://127.0.0.1:$port/$target/3"
check "a pattern is written to LUN 3 and read back" bash -c \
  "qemu-io --image-opts 'driver=raw,file.driver=iscsi,file.transport=tcp,file.portal=127.0.0.1:$port,file.target=$target,file.lun=3,file.initiator-name=$initiator' \
     -c 'write -P 0x6e 0 1M' -c 'read -P 0x6e 0 1M' -c 'read -P 0x6e 448k 64k' >/dev/null"
kill -TERM "$pid"; wait "$pid"
check "SIGTERM: exit 0" test $? -eq 0
pid=

# A restart: the array comes from the state directory, not the file.
sed -i 's/^size = "1G"$/size = "2G"/' "$dir/strata.toml"  # build sections edited: no effect now
start second
check "a restart re-assembles g1 from its superblocks" grep -q "groups/g1: assembled from its superblocks" "$dir/second.err"
check "... and says the file's build sections are not read" grep -q "are not read" "$dir/second.err"
check "the volume is still 1 GiB" bash -c "'$cli' --api $api volume show db | grep -q ' 1.0 GiB '"
check "the pattern is still there" bash -c \
  "qemu-io --image-opts 'driver=raw,file.driver=iscsi,file.transport=tcp,file.portal=127.0.0.1:$port,file.target=$target,file.lun=3,file.initiator-name=$initiator' \
     -c 'read -P 0x6e 0 1M' -c 'read -P 0x6e 960k 64k' >/dev/null"
kill -TERM "$pid"; wait "$pid"
pid=

# Bad files: stopped before anything is touched, exit 2, FILE:LINE:COLUMN.
sed 's/^iscsi_listen/iscsi_listn/' "$dir/strata.toml" >"$dir/typo.toml"
"$stratad" --config "$dir/typo.toml" --state-dir "$dir/none" >/dev/null 2>"$dir/typo.err"
check "a misspelt key: exit 2, its line and column, and the key it meant" bash -c \
  "[[ $? -eq 2 ]] && grep -q 'typo.toml:3:1: daemon: unknown key \"iscsi_listn\" (did you mean \"iscsi_listen\"' '$dir/typo.err'"
sed 's/drives = \["hdd-00", "hdd-01", "hdd-02", "hdd-03"\]/drives = ["hdd-00", "hdd-01", "hdd-02"]/' "$dir/strata.toml" >"$dir/small.toml"
"$stratad" --config "$dir/small.toml" --state-dir "$dir/none" >/dev/null 2>"$dir/small.err"
check "a RAID-6 group of 3 drives: exit 2, naming the group and why" bash -c \
  "[[ $? -eq 2 ]] && grep -q 'small.toml:[0-9]*:[0-9]*: group g1: drives: RAID-6 needs 4' '$dir/small.err'"
check "... and nothing was made" test ! -e "$dir/none"
# Bad flags: exit 2, naming the flag and what it takes, nothing made.
"$stratad" --state-dir "$dir/none" --loops 0 >/dev/null 2>"$dir/flag.err"
check "--loops 0: exit 2, saying what it takes" bash -c "[[ $? -eq 2 ]] && grep -q -- '--loops takes a number from 1 to 256' '$dir/flag.err'"
"$stratad" --state-dir "$dir/none" --spin-us 1ms >/dev/null 2>"$dir/flag.err"
check "--spin-us 1ms: exit 2, saying what it takes" bash -c "[[ $? -eq 2 ]] && grep -q -- '--spin-us takes a number of microseconds' '$dir/flag.err'"
check "... and nothing was made" test ! -e "$dir/none"
exit $failed
