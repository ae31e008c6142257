#!/usr/bin/env bash
# A module's internal/ headers are included only from inside that module: a file under src/ or
# sim/ may include "<dir>/internal/..." only when it lives under <dir>/ (tests and benches of the
# module may, to test the parts directly). Prints each offending include and fails.
set -euo pipefail
root=${1:?usage: internal_includes.sh <source root>}
cd "$root"
bad=0
while IFS=: read -r file _ line; do
  inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$line")
  owner=${inc%%/internal/*}
  case "$file" in
    "$owner"/*) ;;
    *)
      echo "$file includes $inc, internal to $owner/"
      bad=1
      ;;
  esac
done < <(grep -rn --include='*.h' --include='*.cc' -E '#include "[^"]+/internal/' src sim || true)
exit "$bad"
