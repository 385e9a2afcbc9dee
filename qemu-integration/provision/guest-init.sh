#!/bin/sh
# /init of the Belfry guest initramfs (busybox sh as PID 1), see provision.sh initramfs.
#
# Runs /belfry/run (added by the caller) with its output on the console, then prints
#   BELFRY-EXIT <status>
# on a line of its own, syncs and powers off (QEMU then exits). Without /belfry/run it
# starts an interactive shell on the console and powers off when that shell exits.
# If the second UART works, /dev/ttyS1 is put in raw mode and BELFRY_RESULTS=/dev/ttyS1
# is exported (a results channel: QEMU's second -serial, e.g. file:results.txt).
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
export HOME=/root

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null   # may be mounted already
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t tmpfs tmpfs /tmp

export BELFRY_RESULTS=
# The 8250 driver creates ttyS0..3 whether or not the UART exists: only a port that
# accepts stty is real.
if [ -c /dev/ttyS1 ] && stty -F /dev/ttyS1 raw -echo 115200 2>/dev/null; then
    BELFRY_RESULTS=/dev/ttyS1
fi

if [ -e /belfry/run ]; then
    if [ -x /belfry/run ]; then
        /belfry/run </dev/console >/dev/console 2>&1
    else
        sh /belfry/run </dev/console >/dev/console 2>&1
    fi
    status=$?
    printf '\nBELFRY-EXIT %d\n' "$status" >/dev/console
else
    echo "belfry: no /belfry/run, starting a shell (exit it to power off)" >/dev/console
    setsid cttyhack sh
fi

sync
poweroff -f
# Not reached unless poweroff failed: PID 1 exiting panics, and the kernel's
# PANIC_TIMEOUT reboot makes QEMU (-no-reboot) exit.
echo o >/proc/sysrq-trigger 2>/dev/null
exit 1
