#!/usr/bin/env bash
# Every tree path named in README.md and docs/DESIGN.md exists: tokens starting with a
# top-level folder (allocator/, kernels/, ..., .ci/), globs allowed, placeholders (<family>,
# {i}) skipped. Prints each missing path and exits 1 if any, so the docs cannot drift from the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=0
for doc in README.md docs/DESIGN.md; do
  while read -r p; do
    p=${p%%[.,:;)]}          # trailing punctuation of the sentence
    case "$p" in *'<'* | *'{'* | *'...'*) continue ;; esac
    if ! compgen -G "$p" >/dev/null; then
      echo "$doc: $p does not exist"
      missing=1
    fi
  done < <(grep -oE '(^|[^A-Za-z0-9_./-])(\.ci|allocator|apps|configs|docs|engine|kernels|scripts|tests)/[A-Za-z0-9_.*<>{}/-]*' "$doc" |
    sed -E 's/^[^A-Za-z.]//' | sort -u)
done
exit $missing
