#!/bin/sh
# The container's HEALTHCHECK: asks posenc-server's own health service on whatever address
# it was started with (--listen in PID 1's command line; 0.0.0.0 and :: are reached on
# loopback), so the check follows a changed --listen instead of assuming :50051.
listen=0.0.0.0:50051
for arg in $(tr '\0' ' ' </proc/1/cmdline); do
  case "$arg" in --listen=*) listen=${arg#--listen=} ;; esac
done
case "$listen" in
  unix:*) target=$listen ;;
  0.0.0.0:*) target=127.0.0.1:${listen##*:} ;;
  \[::\]:*) target=[::1]:${listen##*:} ;;
  *) target=$listen ;;
esac
exec posenc-client health --target="$target"
