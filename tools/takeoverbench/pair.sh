# Two controllers over one simulated shelf (--small-shelf: the two
# controllers' small default), for the benchmarks here; sourced after
# $stratad is set. State in $dir (removed at exit unless KEEP is set;
# both stratads killed), a on 127.0.0.1:$port and b on 127.0.0.2:$port,
# the API two above, the partner link on 127.0.0.2, five above.
dir=$(mktemp -d); [[ -n "${KEEP:-}" ]] && echo "state in $dir" >&2
pid_a=
pid_b=
trap '[[ -n "$pid_a" ]] && kill -9 $pid_a 2>/dev/null; [[ -n "$pid_b" ]] && kill -9 $pid_b 2>/dev/null; [[ -n "${KEEP:-}" ]] || rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 12000))
link=127.0.0.2:$((port + 5))
ready() { for _ in $(seq 600); do grep -q "stratad is ready" "$1" 2>/dev/null && return 0; sleep 0.05; done; echo "not ready: $1" >&2; cat "${1%.out}.err" >&2; exit 1; }
start_a() { "$stratad" --small-shelf --state-dir "$dir/a" --shelf "$dir/shelf" --iscsi 127.0.0.1:$port --grpc 127.0.0.1:$((port + 2)) --partner-link "$link" >"$dir/a.out" 2>"$dir/a.err" & pid_a=$!; ready "$dir/a.out"; }
start_b() { "$stratad" --controller b --state-dir "$dir/b" --shelf "$dir/shelf" --iscsi 127.0.0.2:$port --grpc 127.0.0.2:$((port + 2)) --partner-link "$link" >"$dir/b.out" 2>"$dir/b.err" & pid_b=$!; ready "$dir/b.out"; }
