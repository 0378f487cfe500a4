#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# scripts/check-layers.sh, on small trees of its own:
#   1. a tree that keeps to its layers passes (exit 0, nothing printed);
#   2. an upward include fails, reported as file:line: a includes b
#      (layer X above Y);
#   3. an include cycle inside one layer fails, reported as a cycle;
#   4. an "allow" line exempts exactly the include it names;
#   5. a module in no layer fails;
#   6. in subfolders, a module sits in its layer's folder: a tree laid out
#      so passes, a module in another layer's folder fails and is named;
#   7. the agent's own tree passes with the repository's layers.txt.
. "$(dirname "$0")/../lib.sh"
CHECK="$(dirname "$0")/../../scripts/check-layers.sh"
ROOT="$(dirname "$0")/../.."

mk() {	# mk DIR FILE INCLUDES...: a file including the given headers
	local d=$1 f=$2; shift 2
	mkdir -p "$d"; : >"$d/$f"
	for h in "$@"; do echo "#include \"$h\"" >>"$d/$f"; done
}
cat >"$TMP/layers.txt" <<'TXT'
# bottom first
layer base: util
layer mid:  codec conn
layer top:  req
TXT

# 1. clean: req -> conn -> codec -> util
mk "$TMP/ok" util.h; mk "$TMP/ok" util.c util.h
mk "$TMP/ok" codec.h util.h; mk "$TMP/ok" conn.c conn.h codec.h "stdio.h"
mk "$TMP/ok" conn.h; mk "$TMP/ok" req.c req.h conn.h util.h; mk "$TMP/ok" req.h
out=$(sh "$CHECK" "$TMP/ok" "$TMP/layers.txt"); rc=$?
expect_eq "$rc:$out" "0:" "a tree within its layers passes, silently"

# 2. upward: conn.c includes req.h
cp -r "$TMP/ok" "$TMP/up"; echo '#include "req.h"' >>"$TMP/up/conn.c"
out=$(sh "$CHECK" "$TMP/up" "$TMP/layers.txt"); rc=$?
ok $((rc == 0)) "an upward include fails (exit $rc)"
expect_eq "$(echo "$out" | grep -c 'up/conn.c:4: conn includes req (layer top above mid)')" 1 \
	"the upward include is reported with file, line and layers"

# 3. cycle inside one layer: codec.h includes conn.h, conn.c codec.h
cp -r "$TMP/ok" "$TMP/cyc"; echo '#include "conn.h"' >>"$TMP/cyc/codec.h"
out=$(sh "$CHECK" "$TMP/cyc" "$TMP/layers.txt"); rc=$?
ok $((rc == 0)) "an include cycle fails (exit $rc)"
echo "$out" | grep -Eq '^cycle: (codec -> conn -> codec|conn -> codec -> conn)$'
ok $? "the cycle is reported with its modules ('$out')"
expect_eq "$(echo "$out" | grep -vc '^cycle:')" 0 "a cycle within a layer is no layer violation"

# 4. allow exempts exactly one include
cp "$TMP/layers.txt" "$TMP/allow.txt"; echo 'allow conn req  # debt' >>"$TMP/allow.txt"
out=$(sh "$CHECK" "$TMP/up" "$TMP/allow.txt"); rc=$?
expect_eq "$rc:$out" "0:" "an allow line exempts the include it names"
out=$(sh "$CHECK" "$TMP/cyc" "$TMP/allow.txt"); rc=$?
ok $((rc == 0)) "... and no other (the cycle still fails)"

# 5. a module in no layer
cp -r "$TMP/ok" "$TMP/stray"; mk "$TMP/stray" stray.c util.h
out=$(sh "$CHECK" "$TMP/stray" "$TMP/layers.txt"); rc=$?
ok $((rc == 0)) "a module in no layer fails (exit $rc)"
expect_eq "$(echo "$out" | grep -c 'module stray is in no layer')" 1 "and is named"

# 6. folders: base/util, mid/{codec,conn}, top/req pass; mid/util fails
for f in util.h util.c; do mkdir -p "$TMP/dirs/base"; cp "$TMP/ok/$f" "$TMP/dirs/base/"; done
for f in codec.h conn.c conn.h; do mkdir -p "$TMP/dirs/mid"; cp "$TMP/ok/$f" "$TMP/dirs/mid/"; done
for f in req.c req.h; do mkdir -p "$TMP/dirs/top"; cp "$TMP/ok/$f" "$TMP/dirs/top/"; done
out=$(sh "$CHECK" "$TMP/dirs" "$TMP/layers.txt"); rc=$?
expect_eq "$rc:$out" "0:" "modules in their layers' folders pass"
mv "$TMP/dirs/base/util.c" "$TMP/dirs/mid/util.c"
out=$(sh "$CHECK" "$TMP/dirs" "$TMP/layers.txt"); rc=$?
ok $((rc == 0)) "a module in another layer's folder fails (exit $rc)"
expect_eq "$(echo "$out" | grep -c 'mid/util.c: module util of layer base sits in the folder of another layer')" 1 \
	"and is named with its file and layer"

# 7. the agent
out=$(cd "$ROOT" && sh scripts/check-layers.sh agent scripts/layers.txt); rc=$?
expect_eq "$rc:$out" "0:" "the agent keeps to scripts/layers.txt"
finish
