# SPDX-License-Identifier: Apache-2.0
# Sourced first by a suite that needs a network namespace of its own (a
# dead DNS server, loopback only): re-runs the suite inside a private
# mount and network namespace, or skips it where unshare is not allowed
# (it needs root). Inside, the caller brings lo up after sourcing lib.sh.
if [ "${1:-}" != --inside ]; then
	if ! unshare -mn --propagation private true 2>/dev/null; then
		echo "# skip: unshare -mn is not allowed here (needs root)"
		echo "$(basename "$0"): 0 passed, 0 failed"
		exit 0
	fi
	exec unshare -mn --propagation private bash "$0" --inside
fi
