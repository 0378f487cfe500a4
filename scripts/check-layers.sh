#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Checks the agent's includes against the declared layers.
#
#   sh scripts/check-layers.sh [SRCDIR [LAYERS]]   (agent, scripts/layers.txt)
#
# Every '#include "x.h"' of the .c and .h files under SRCDIR (its
# subfolders included: a module is named by its file, wherever it sits) is compared with the
# layers of LAYERS (its format is described there): a module (a .c and its
# .h) may include only its own layer or a lower one. Include cycles between
# modules are reported too. System includes (<x.h>) are not looked at.
# Prints one line per problem, "file:line: a includes b (layer X above Y)"
# or "cycle: a -> b -> a", and exits 1 if there is any.
# A file in a subfolder must sit in its layer's folder (server/ holds
# both the connection and the server).
# Does not compile anything, and does not follow macros or #if.
dir=${1:-agent}
layers=${2:-scripts/layers.txt}
[ -f "$layers" ] || { echo "check-layers: no $layers" >&2; exit 2; }
set -- $(find "$dir" -name '*.[ch]' | sort)
[ -f "${1:-}" ] || { echo "check-layers: no sources in $dir" >&2; exit 2; }
awk -v LAYERS="$layers" -v DIR="$dir" '
function mod(path,   m) {
	m = path
	sub(/.*\//, "", m)
	sub(/\.[ch]$/, "", m)
	return m
}
function problem(text) {
	print text
	bad = 1
}
# A file in a subfolder of SRCDIR sits in the folder of its layer: that folder
# is named after the layer, but for server/, which holds the connection
# and the server layers. Files at the top of SRCDIR are not checked.
function folder_fits(path, layer,   f) {
	f = substr(path, length(DIR) + 2)
	if (f !~ /\//)
		return 1
	sub(/\/.*/, "", f)
	return f == layer || (f == "server" && layer == "connection")
}
# Depth-first search from <m>; <path> is the walk so far. Reports a cycle
# when it meets a module on the current walk.
function dfs(m, path,   k, n, i, t, p) {
	state[m] = 1
	n = nsucc[m]
	for (i = 1; i <= n; i++) {
		t = succ[m, i]
		if (state[t] == 1) {
			p = path " -> " t
			sub(".*(^| )" t " -> ", t " -> ", p)
			problem("cycle: " p)
		} else if (state[t] == 0) {
			dfs(t, path " -> " t)
		}
	}
	state[m] = 2
}
FILENAME == LAYERS {
	sub(/#.*/, "")
	if ($1 == "layer") {
		name = $2
		sub(/:$/, "", name)
		nlayers++
		lname[nlayers] = name
		for (i = 3; i <= NF; i++) {
			if ($i in level)
				problem(LAYERS ":" FNR ": " $i " listed twice")
			level[$i] = nlayers
		}
	} else if ($1 == "allow" && NF == 3) {
		allowed[$2, $3] = 1
	} else if (NF > 0) {
		problem(LAYERS ":" FNR ": cannot read: " $0)
	}
	next
}
FNR == 1 {
	m = mod(FILENAME)
	if (!(m in level))
		problem(FILENAME ": module " m " is in no layer of " LAYERS)
	else if (!folder_fits(FILENAME, lname[level[m]]))
		problem(FILENAME ": module " m " of layer " lname[level[m]] \
		        " sits in the folder of another layer")
}
/^[ \t]*#[ \t]*include[ \t]*"/ {
	inc = $0
	sub(/^[^"]*"/, "", inc)
	sub(/".*/, "", inc)
	sub(/.*\//, "", inc)
	if (inc !~ /\.h$/)
		next
	b = mod(inc)
	a = mod(FILENAME)
	if (a == b || ((a, b) in allowed))
		next
	if (!((a, b) in edge)) {
		edge[a, b] = 1
		succ[a, ++nsucc[a]] = b
		mods[a] = mods[b] = 1
	}
	if (!(b in level) || !(a in level))
		next
	if (level[b] > level[a])
		problem(FILENAME ":" FNR ": " a " includes " b " (layer " \
		        lname[level[b]] " above " lname[level[a]] ")")
}
END {
	for (m in mods)
		if (state[m] == 0)
			dfs(m, m)
	exit bad
}
' "$layers" "$@"
