#!/bin/sh
# Runs a command and succeeds only if it exits with status 2 (a user error).
"$@"
rc=$?
if [ "$rc" -ne 2 ]; then
  echo "exit2.sh: expected exit status 2, got $rc from: $*" >&2
  exit 1
fi
exit 0
