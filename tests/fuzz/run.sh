#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with Debian's clang 16 and
# runs each for a bounded time from a fresh copy of its seed corpus. This is
# what CI runs; see README.md.
#
#   tests/fuzz/run.sh [--seconds N] [--build-dir DIR] [FUZZER...]
#
# --seconds N      how long each fuzzer runs (default 20)
# --build-dir DIR  objects, binaries, working corpora and crash files (default build/fuzz)
# FUZZER...        text_fuzz, cdb_fuzz, pdu_fuzz, nvme_pdu_fuzz, nvme_connection_fuzz (default: all five)
#
# Exits 0 when no fuzzer found anything; 1 when one found a crash, leak or
# timeout (each printed with its input file and the command that replays
# it); 77 (ctest's "skipped") when clang 16, its libFuzzer runtime or
# libc++ 16 is missing; 2 for a bad argument or a build failure.
#
# The build is incremental: an object is rebuilt only when its source or a
# header it includes changed, or the flags did.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=20
build_dir=build/fuzz
fuzzers=()
while (($# > 0)); do
  case "$1" in
    --seconds) seconds="${2:?--seconds needs a value}"; shift 2 ;;
    --build-dir) build_dir="${2:?--build-dir needs a value}"; shift 2 ;;
    text_fuzz | cdb_fuzz | pdu_fuzz | nvme_pdu_fuzz | nvme_connection_fuzz) fuzzers+=("$1"); shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "run.sh: --seconds takes a number" >&2; exit 2; }
((${#fuzzers[@]} > 0)) || fuzzers=(text_fuzz cdb_fuzz pdu_fuzz nvme_pdu_fuzz nvme_connection_fuzz)

skip() {
  echo "==================================================================" >&2
  echo "run.sh: SKIPPED, the fuzzers were NOT built or run: $*" >&2
  echo "run.sh: install clang-16 libclang-rt-16-dev libc++-16-dev libc++abi-16-dev (tools/install-deps.sh)" >&2
  echo "==================================================================" >&2
  exit 77
}
cxx=clang++-16
command -v "$cxx" > /dev/null || skip "$cxx is not installed"
# Through the compiler cache when it is here, as the presets compile
# (README: "The compiler cache"); the line tables name the tree as ".".
compiler=("$cxx")
command -v ccache > /dev/null && compiler=(env CCACHE_BASEDIR="$PWD" ccache "$cxx")
[[ -f "$("$cxx" -print-runtime-dir)/libclang_rt.fuzzer-x86_64.a" ]] || skip "libFuzzer (libclang-rt-16-dev) is not installed"
echo '#include <expected>
int main() { return std::expected<int, int>(0).value(); }' | "$cxx" -std=c++2b -stdlib=libc++ -x c++ - -o /dev/null 2> /dev/null ||
  skip "libc++ 16 (libc++-16-dev, libc++abi-16-dev) is not installed"

# libc++, not GCC 12's libstdc++: its <expected> is hidden from clang < 19,
# which reports __cpp_concepts as 201907L (README.md). Debian's libFuzzer
# runtime is built against libstdc++, so that is linked too, by file name:
# clang turns -lstdc++ into -lc++ under -stdlib=libc++.
std_flags=(-std=c++2b -stdlib=libc++)
sanitize=(-fsanitize=address,undefined -fno-sanitize-recover=all)
# The project's warning flags (CMakeLists.txt), errors only in the fuzzers'
# own sources: clang warns about things GCC does not, and a clang-only
# warning in the project should show, not stop the fuzzing.
warnings=(-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough)
# Line tables only (-g1), as the presets: a crash's stack names files and
# lines, and a file compiles about a third faster than with -g.
common=("${std_flags[@]}" -DBOOST_ASIO_NO_DEPRECATED -I. -O1 -g1 -fdebug-prefix-map="$PWD"=. -fno-omit-frame-pointer "${sanitize[@]}" "${warnings[@]}")
libs=(-lisal -luring -lcrypto -l:libstdc++.so.6 -lpthread)
# What the targets need: the SCSI layer, the iSCSI target and the NVMe/TCP framing whole, and of
# raid/device only the memory volume (the rest needs std::chrono's <=>,
# which libc++ 16 lacks, and nothing here uses it).
project_sources=(raid/device/status.cc raid/device/block_device.cc raid/device/memory_device.cc
                 target/crc32c.cc target/stream_reader.cc target/scsi/*.cc target/iscsi/*.cc target/nvme/*.cc)

obj_dir="$build_dir/obj"
mkdir -p "$obj_dir"
flags_now="${common[*]} ${libs[*]}"
if [[ ! -f "$build_dir/flags" || "$(cat "$build_dir/flags")" != "$flags_now" ]]; then
  rm -f "$obj_dir"/*.o "$obj_dir"/*.d "$build_dir"/*.a
  echo "$flags_now" > "$build_dir/flags"
fi

# Whether `object` must be rebuilt: missing, or older than anything its
# dependency file (-MMD) names.
stale() {
  local object="$1" deps="$2" f
  [[ -f "$object" && -f "$deps" ]] || return 0
  for f in $(sed -e 's/\\$//' -e '1s/^[^:]*://' "$deps"); do
    [[ -e "$f" && ! "$f" -nt "$object" ]] || return 0
  done
  return 1
}
# Compiles `source` into obj/, and names the object in $compiled. One file
# at a time: the machines CI runs on are small.
compile() {
  local source="$1"; shift
  compiled="$obj_dir/$(echo "${source%.cc}" | tr / _).o"
  if stale "$compiled" "${compiled%.o}.d"; then
    recompiled=1
    echo "run.sh: compiling $source"
    if ! "${compiler[@]}" "${common[@]}" "$@" -MMD -MF "${compiled%.o}.d" -c "$source" -o "$compiled"; then
      echo "run.sh: cannot compile $source" >&2
      exit 2
    fi
  fi
}

# Until a pass compiles nothing: a header edited during the build would
# otherwise leave objects that disagree on a type's layout.
for pass in 1 2 3 4; do
  recompiled=0
  objects=()
  for s in "${project_sources[@]}"; do
    compile "$s" -fsanitize=fuzzer-no-link
    objects+=("$compiled")
  done
  fuzzer_objects=()
  for f in "${fuzzers[@]}"; do
    compile "tests/fuzz/$f.cc" -fsanitize=fuzzer-no-link -Werror
    fuzzer_objects+=("$compiled")
  done
  ((recompiled == 0)) && break
  ((pass < 4)) || { echo "run.sh: the sources keep changing during the build" >&2; exit 2; }
done
archive="$build_dir/libstrata_fuzz.a"
for o in "${objects[@]}"; do
  if [[ ! -f "$archive" || "$o" -nt "$archive" ]]; then
    rm -f "$archive"
    ar rcs "$archive" "${objects[@]}"
    break
  fi
done

declare -A max_len=([text_fuzz]=12288 [cdb_fuzz]=4096 [pdu_fuzz]=16384 [nvme_pdu_fuzz]=16384 [nvme_connection_fuzz]=32768)
declare -A dict=([text_fuzz]=tests/fuzz/iscsi.dict [pdu_fuzz]=tests/fuzz/iscsi.dict)
for i in "${!fuzzers[@]}"; do
  f="${fuzzers[$i]}"
  object="${fuzzer_objects[$i]}"
  binary="$build_dir/$f"
  if [[ ! -f "$binary" || "$object" -nt "$binary" || "$archive" -nt "$binary" ]]; then
    echo "run.sh: linking $binary"
    "$cxx" "${std_flags[@]}" -fsanitize=fuzzer "${sanitize[@]}" "$object" "$archive" "${libs[@]}" -o "$binary" || exit 2
  fi
done

symbolizer=$(command -v llvm-symbolizer-16 || command -v addr2line || true)
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0${symbolizer:+:external_symbolizer_path=$symbolizer}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

failed=0
for f in "${fuzzers[@]}"; do
  corpus="$build_dir/corpus/$f"
  artifacts="$build_dir/artifacts/$f"
  rm -rf "$corpus" "$artifacts"
  mkdir -p "$corpus" "$artifacts"
  cp tests/fuzz/corpus/"$f"/* "$corpus"/
  # -error_exitcode: libFuzzer's default, 77, is ctest's "skipped".
  options=(-max_total_time="$seconds" -max_len="${max_len[$f]}" -timeout=10 -print_final_stats=1
           -error_exitcode=1 -artifact_prefix="$artifacts/")
  [[ -n "${dict[$f]:-}" ]] && options+=(-dict="${dict[$f]}")
  echo "== $f: ${seconds} s, -max_len=${max_len[$f]} =="
  status=0
  "$build_dir/$f" "${options[@]}" "$corpus" > "$build_dir/$f.log" 2>&1 || status=$?
  grep -E '^stat::|^Done ' "$build_dir/$f.log" || true
  found=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \))
  if ((status != 0)) || [[ -n "$found" ]]; then
    failed=1
    echo "!! $f FAILED (exit $status); its log: $build_dir/$f.log" >&2
    grep -E '==fuzz==|ERROR: |SUMMARY: |runtime error' "$build_dir/$f.log" | head -n 5 >&2 || true
    for input in $found; do
      echo "!! input: $input" >&2
      echo "!! replay: $build_dir/$f $input" >&2
    done
  fi
done
exit "$failed"
