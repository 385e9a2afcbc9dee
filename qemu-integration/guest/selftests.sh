#!/bin/sh
# selftests.sh: the guest side of `cargo belfry selftests`: Linux's own VFIO selftests against
# the first Belfry device. Loads the module (unless --no-module) and unbinds the device from
# it, loads the image's VFIO modules (/belfry/vfio/*.ko, named in load order), binds the
# device to vfio-pci through driver_override, then runs each selftest named on the command
# line (`selftests.sh TEST...`, binaries in /belfry/selftests) with the device's address. Each test's KTAP
# output goes to the results channel framed by `BELFRY-SELFTEST-BEGIN NAME` and
# `BELFRY-SELFTEST-END NAME STATUS`. The exit status is non-zero if a test failed or the
# device could not be handed to vfio-pci.
. "$(dirname "$0")/lib.sh"

VFIO_MODULES=${BELFRY_VFIO_MODULES:-/belfry/vfio}
SELFTESTS_DIR=${BELFRY_SELFTESTS_DIR:-/belfry/selftests}

# results LINE...: a line on the results channel (the console without one).
results() {
    if [ -n "$BELFRY_RESULTS" ]; then
        printf '%s\n' "$*" >"$BELFRY_RESULTS"
    else
        printf '%s\n' "$*"
    fi
}

if [ -n "$BELFRY_MODULE" ]; then
    load_module "insmod" || exit 1
fi
addr=$(belfry_devices | head -n 1)
[ -n "$addr" ] || { fail "no Belfry device on the PCI bus"; exit 1; }
dev=$SYSFS/bus/pci/devices/$addr
if [ -e "$dev/driver" ]; then
    note "unbinding $addr from $(basename "$(readlink "$dev/driver")")"
    echo "$addr" >"$dev/driver/unbind" || { fail "unbinding $addr failed"; exit 1; }
fi
# Without interrupt remapping in the vIOMMU, type1 refuses the device's MSI unless told that
# this guest accepts unisolated MSI (it is the only user of its interrupts).
for ko in "$VFIO_MODULES"/*.ko; do
    args=''
    case $ko in *vfio_iommu_type1.ko) args=allow_unsafe_interrupts=1 ;; esac
    # shellcheck disable=SC2086  # none or one argument
    out=$(insmod "$ko" $args 2>&1) || { fail "insmod $ko: $out"; exit 1; }
done
echo vfio-pci >"$dev/driver_override"
echo "$addr" >"$SYSFS/bus/pci/drivers_probe"
driver=$(basename "$(readlink "$dev/driver" 2>/dev/null)")
[ "$driver" = vfio-pci ] || { fail "$addr is bound to '${driver:-nothing}', not vfio-pci: $(dmesg | tail -n 5)"; exit 1; }
note "$addr bound to vfio-pci (IOMMU group $(basename "$(readlink "$dev/iommu_group")"))"

for test in "$@"; do
    note "selftest $test on $addr"
    results "BELFRY-SELFTEST-BEGIN $test"
    if [ -n "$BELFRY_RESULTS" ]; then
        "$SELFTESTS_DIR/$test" "$addr" >"$BELFRY_RESULTS" 2>&1
    else
        "$SELFTESTS_DIR/$test" "$addr" 2>&1
    fi
    status=$?
    results "BELFRY-SELFTEST-END $test $status"
    [ "$status" -eq 0 ] || fail "$test exited with status $status"
done
[ "$FAILURES" -eq 0 ]
