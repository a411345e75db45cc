#!/bin/sh
# term_when.sh PATH CMD...: runs CMD, sends it SIGTERM once PATH exists (at
# most 120 s later), and exits with CMD's status (143 when the signal
# stopped it); 99 if PATH never appeared.
path=$1; shift
"$@" &
pid=$!
i=0
while [ ! -e "$path" ]; do
  i=$((i + 1))
  if [ $i -gt 1200 ] || ! kill -0 $pid 2>/dev/null; then kill -TERM $pid 2>/dev/null; wait $pid; exit 99; fi
  sleep 0.1
done
kill -TERM $pid
wait $pid
