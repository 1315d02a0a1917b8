#!/usr/bin/env bash
# The array's identity on its shelf (docs/controller-area.md), with real
# processes: an array built on a shelf of its own (--shelf) carries its id
# on every group member's controller area and shows it in the controller
# resource; a restart finds it again; an empty state directory refuses to
# build over that shelf, and another array's state directory refuses to
# start on it, each with the reason and an event, leaving every drive's
# reserved area (superblocks, bitmap, controller area) byte for byte as it
# was.
#   stratad_shelf_test.sh PATH/TO/stratad PATH/TO/strata
set -uo pipefail
source "$(dirname "$0")/lib.sh"
stratad=$1
cli=$2
dir=$(mktemp -d)
pid=
trap '[[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 12000))
api=127.0.0.1:$((port + 2))
s() { "$cli" --api "$api" "$@"; }

# start STATE SHELF: a stratad on the small shelf, in the background ($pid)
start() {
  "$stratad" --small-shelf --state-dir "$dir/$1" --shelf "$dir/$2" --iscsi 127.0.0.1:$port --grpc "$api" \
    >"$dir/out" 2>"$dir/err" &
  pid=$!
}
stop() { kill -TERM "$pid"; wait "$pid"; local status=$?; pid=; return $status; }
# start_status STATE SHELF: starts one that must not come up; its exit status
start_status() { start "$1" "$2"; wait "$pid"; local status=$?; pid=; return $status; }
# The first MiB of every drive (its reserved area), hashed: what a refused
# start must not change.
reserved_areas() { for f in "$dir/$1"/*.img; do head -c 1048576 "$f" | sha256sum; done; }

start array-x shelf-x
wait_ready "$dir/out" "$dir/err"
id=$(s --json controller show a | sed -n 's/.*"array_id": *"\([0-9a-f]*\)".*/\1/p')
check "the controller says which array it belongs to (32 hex digits)" test "${#id}" = 32
check "the build logged the id" grep -q "the array's id is $id" "$dir/err"
# A group and a pool made through the API carry the id and the ownership too.
# area FILE: the controller area of a member (the last 64 KiB of its 1 MiB reserved area)
area() { dd if="$1" bs=65536 skip=15 count=1 status=none | tr -c '[:print:]' '.'; }
quiet s disk add ssd-x --kind ssd --size 1G
quiet s disk add ssd-y --kind ssd --size 1G
quiet s group create gx --raid1 ssd-x ssd-y
quiet s pool create px gx
check "a new group's members carry the array's identity (STRATACA records)" grep -q STRATACA <(area "$dir/shelf-x/ssd-x.img")
check "and its pool's ownership (pools/px, controller a)" grep -q 'pools/px.a' <(area "$dir/shelf-x/ssd-y.img")
check "the pool says who owns it" bash -c "'$cli' --api $api --json pool show px | grep -q '\"owner\": *\"controllers/a\"'"
check "stratad stops cleanly" stop

start array-x shelf-x
wait_ready "$dir/out" "$dir/err"
check "a restart finds the same array" test "$(s --json controller show a | sed -n 's/.*"array_id": *"\([0-9a-f]*\)".*/\1/p')" = "$id"
check "the restart builds nothing" bash -c "! grep -q 'building' '$dir/err'"
check "stratad stops cleanly" stop
before=$(reserved_areas shelf-x)

# An empty state directory over that shelf: refused, nothing written.
start_status array-y shelf-x
status=$?
check "an empty state directory is not built over another array's shelf (exit 1)" test "$status" = 1
check "it says which array holds the shelf" grep -q "holds array $id" "$dir/err"
check "and records the refusal as an event" grep -q "event: refused to start" "$dir/err"
check "and not a clean stop of an array that never started" bash -c "! grep -q 'event: the array stopped cleanly' '$dir/err'"
check "no drive's reserved area changed" test "$(reserved_areas shelf-x)" = "$before"
# Refused again the next time (the refusal's event is all its state directory holds).
start_status array-y shelf-x
status=$?
check "and again at the next start" test "$status" = 1

# Another array, on a shelf of its own; then that array's drives swapped
# for the first array's (its records name its drives by path: the files in
# shelf-z now hold array x).
start array-z shelf-z
wait_ready "$dir/out" "$dir/err"
other=$(s --json controller show a | sed -n 's/.*"array_id": *"\([0-9a-f]*\)".*/\1/p')
check "a second array gets an id of its own" test -n "$other" -a "$other" != "$id"
check "stratad stops cleanly" stop
mv "$dir/shelf-z" "$dir/shelf-z.own"
mv "$dir/shelf-x" "$dir/shelf-z"
start_status array-z shelf-z
status=$?
check "a state directory does not start on another array's drives (exit 1)" test "$status" = 1
check "it names both arrays" grep -q "belongs to array $id, not to this one ($other)" "$dir/err"
check "no drive's reserved area changed" test "$(reserved_areas shelf-z)" = "$before"
mv "$dir/shelf-z" "$dir/shelf-x"
mv "$dir/shelf-z.own" "$dir/shelf-z"

# The first array still starts on its own shelf.
start array-x shelf-x
wait_ready "$dir/out" "$dir/err"
check "the shelf's own array still starts" test "$(s --json controller show a | sed -n 's/.*"array_id": *"\([0-9a-f]*\)".*/\1/p')" = "$id"
check "stratad stops cleanly" stop
exit $failed
