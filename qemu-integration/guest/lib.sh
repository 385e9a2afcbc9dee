# Sourced by the Belfry guest scripts (busybox sh). The settings come from the /belfry/run
# that belfry-launcher generates: BELFRY_DEVICES (devices QEMU attaches), BELFRY_PCI_VENDOR /
# BELFRY_PCI_DEVICE (from device/abi), BELFRY_MODULE (the .ko, empty with --no-module),
# BELFRY_LSPCI_BEGIN/END (marker lines), BELFRY_SUITE_ARGS (the suite's arguments, quoted). The initramfs /init exports BELFRY_RESULTS
# (/dev/ttyS1, the results channel, or empty). BELFRY_SYSFS/BELFRY_PROC let the scripts run
# against a fake tree on the host.

SYSFS=${BELFRY_SYSFS:-/sys}
PROC=${BELFRY_PROC:-/proc}
FAILURES=0

# fail REASON...: report one failed check (the launcher collects these lines).
fail() {
    echo "CHECK FAILED: $*"
    FAILURES=$((FAILURES + 1))
}

note() {
    echo "belfry-guest: $*"
}

# belfry_devices: the address of every device with the Belfry PCI id, in bus order.
belfry_devices() {
    for d in "$SYSFS"/bus/pci/devices/*; do
        [ -r "$d/vendor" ] || continue
        if [ "$(cat "$d/vendor")" = "$BELFRY_PCI_VENDOR" ] &&
            [ "$(cat "$d/device")" = "$BELFRY_PCI_DEVICE" ]; then
            echo "${d##*/}"
        fi
    done
}

# count_lines: number of non-empty lines on stdin.
count_lines() {
    grep -c . || true
}

# module_log ADDR: the module's recent kernel messages about ADDR (or without an address),
# formatted as " (dmesg: a; b)", or nothing.
module_log() {
    msgs=$(dmesg | grep -i belfry | grep -E "$1|identity|self-test|probe|error|fail" |
        sed 's/^\[[ 0-9.]*\] //' | tail -n 4 | awk 'NR > 1 { printf "; " } { printf "%s", $0 }')
    [ -z "$msgs" ] || echo " (dmesg: $msgs)"
}

# The module's hang_timeout_ms for this kernel: BELFRY_HANG_TIMEOUT_MS if set; on the debug
# kernel (kmemleak, KASAN and lockdep: 4-5 times slower under TCG, where the default 2 s once
# reset an engine whose queue was only slow) 8000; otherwise the module's default (2000).
# Tests that shorten it on purpose write the sysfs parameter and put back what they found.
DEBUG_HANG_TIMEOUT_MS=8000
module_args() {
    if [ -n "${BELFRY_HANG_TIMEOUT_MS:-}" ]; then
        echo "hang_timeout_ms=$BELFRY_HANG_TIMEOUT_MS"
    elif [ -e "$SYSFS/kernel/debug/kmemleak" ]; then
        echo "hang_timeout_ms=$DEBUG_HANG_TIMEOUT_MS"
    fi
}

# load_module LABEL: insmod the module (with module_args); a failure is a failed check.
load_module() {
    # Word splitting intended: none or one argument.
    # shellcheck disable=SC2046
    out=$(insmod "$BELFRY_MODULE" $(module_args) 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        fail "$1: insmod $BELFRY_MODULE failed (status $rc): $out$(module_log belfry)"
        return 1
    fi
    return 0
}

# irq_count IRQ: total count of IRQ over all CPUs in /proc/interrupts (empty if absent).
irq_line() {
    grep -E "^ *$1:" "$PROC/interrupts"
}
irq_total() {
    echo "$1" | awk '{ s = 0; for (i = 2; i <= NF; i++) { if ($i ~ /^[0-9]+$/) s += $i; else break } print s }'
}

# device_irqs ADDR: the Linux IRQ numbers of ADDR's MSI/MSI-X vectors.
device_irqs() {
    ls "$SYSFS/bus/pci/devices/$1/msi_irqs" 2>/dev/null | sort -n
}
