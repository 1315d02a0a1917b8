#!/usr/bin/env bash
# Formats Strata's C++ and protobuf sources with Debian 12's clang-format
# (14) and the tree's .clang-format, or with --check lists the files that
# are not formatted and fails (tools/test.sh, so CI, runs the check).
#
#   tools/format.sh            format every tracked *.cc, *.h and *.proto in place
#   tools/format.sh --check    change nothing; exit 1 if a file is unformatted
#
# One version, named: clang-format's versions format the same file
# differently, and the check must agree with the formatter.
set -euo pipefail
cd "$(dirname "$0")/.."

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "format.sh: unknown argument $1 (--check, or none)" >&2; exit 2 ;;
esac

formatter=clang-format-14
command -v "$formatter" > /dev/null ||
  { echo "format.sh: $formatter is missing (package clang-format; tools/install-deps.sh installs it)" >&2; exit 2; }

if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cc' '*.h' '*.proto')
else
  mapfile -t files < <(find . -path ./build -prune -o -type f \( -name '*.cc' -o -name '*.h' -o -name '*.proto' \) -print)
fi

if ! $check; then
  printf '%s\0' "${files[@]}" | xargs -0 "$formatter" -i
  exit 0
fi
# One run over every file (a process per file takes seconds); its
# complaints name the files ("path:line:col: error: ...").
report=$(printf '%s\0' "${files[@]}" | xargs -0 "$formatter" --dry-run -Werror 2>&1) || true
if [[ -n "$report" ]]; then
  mapfile -t unformatted < <(grep -oE '^[^:]+:[0-9]+:[0-9]+: error' <<< "$report" | cut -d: -f1 | sort -u)
  echo "format.sh: ${#unformatted[@]} of ${#files[@]} files are not formatted (tools/format.sh formats them):" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  echo "format.sh: the first differences:" >&2
  head -n 12 <<< "$report" >&2
  exit 1
fi
echo "format.sh: all ${#files[@]} sources formatted ($("$formatter" --version | grep -o 'version [0-9.]*'))"
