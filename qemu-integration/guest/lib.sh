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

# In busybox sh every command substitution and external command is a fork, which costs
# ~250 ms on the debug kernel under TCG: the helpers below read sysfs with builtins and one awk.

# belfry_devices: the address of every device with the Belfry PCI id, in bus order.
belfry_devices() {
    set --
    for d in "$SYSFS"/bus/pci/devices/*; do
        [ -r "$d/vendor" ] && set -- "$@" "$d/vendor" "$d/device"
    done
    [ $# -gt 0 ] || return 0
    awk -v vendor="$BELFRY_PCI_VENDOR" -v device="$BELFRY_PCI_DEVICE" '
        FNR == 1 { n = split(FILENAME, p, "/"); addr = p[n - 1] }
        FILENAME ~ /\/vendor$/ { v[addr] = $0 }
        FILENAME ~ /\/device$/ && v[addr] == vendor && $0 == device { print addr }' "$@"
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

# device_irqs ADDR: IRQS is the Linux IRQ numbers of ADDR's MSI/MSI-X vectors, space-separated.
device_irqs() {
    IRQS=
    for f in "$SYSFS/bus/pci/devices/$1/msi_irqs"/*; do
        [ -e "$f" ] && IRQS="$IRQS ${f##*/}"
    done
}

# count_nodes: NODES is the number of /dev/belfry* nodes.
count_nodes() {
    NODES=0
    for n in /dev/belfry*; do
        [ -e "$n" ] && NODES=$((NODES + 1))
    done
}
