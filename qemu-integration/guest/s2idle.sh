#!/bin/sh
# s2idle.sh [TAG]: one system sleep (suspend-to-idle, `echo freeze > /sys/power/state`), woken
# by the launcher. Needs BELFRY_WAKE=key (exported by the launcher when it presses keys through
# QEMU's monitor on request, qemu-integration/launcher/src/boot/wake.rs). It enables the i8042
# keyboard port as a wakeup source, prints `BELFRY-SLEEP TAG` on the console (the launcher then
# presses a key every second), sleeps, prints `BELFRY-AWAKE TAG` and puts the port's wakeup
# setting back. Exit status: 0 after a completed sleep (/sys/power/suspend_stats/success
# counted it), 2 without BELFRY_WAKE or a wakeup source, 3 if the kernel refused the sleep
# (the write's error, e.g. a driver's suspend callback failing: "Device or resource busy"),
# 4 if the sleep was not counted as a success.
SYSFS=${BELFRY_SYSFS:-/sys}
TAG=${1:-s2idle}
CONSOLE=${BELFRY_CONSOLE:-/dev/console}
WAKEUP=$SYSFS/bus/serio/devices/serio0/power/wakeup
STATS=$SYSFS/power/suspend_stats

if [ "${BELFRY_WAKE:-}" != key ]; then
    echo "s2idle: BELFRY_WAKE is '${BELFRY_WAKE:-}', not key: nothing would wake the guest"
    exit 2
fi
if [ ! -w "$WAKEUP" ]; then
    echo "s2idle: no keyboard wakeup source ($WAKEUP)"
    exit 2
fi
old=$(cat "$WAKEUP")
before=$(cat "$STATS/success")
echo enabled >"$WAKEUP"
echo "BELFRY-SLEEP $TAG" >"$CONSOLE"
err=$( (echo freeze >"$SYSFS/power/state") 2>&1)
rc=$?
echo "BELFRY-AWAKE $TAG" >"$CONSOLE"
echo "$old" >"$WAKEUP"
if [ $rc -ne 0 ]; then
    echo "s2idle: echo freeze > /sys/power/state failed: $err (failed steps: $(cat "$STATS/fail"), last failed device: $(cat "$STATS/last_failed_dev" 2>/dev/null))"
    exit 3
fi
after=$(cat "$STATS/success")
if [ "$after" -le "$before" ]; then
    echo "s2idle: the sleep returned but suspend_stats/success stayed at $after"
    exit 4
fi
echo "s2idle: slept and woke ($TAG)"
exit 0
