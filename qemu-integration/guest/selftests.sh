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

# Without /dev/iommu (a kernel built without IOMMUFD, as Debian's cloud image is) the cases
# that need it cannot run: vfio_iommufd_setup_test as a whole and the iommufd variants of the
# others (excluded with the harness's -V) are reported as `# BELFRY-SKIP CASE: reason`.
NO_IOMMUFD="the kernel has no IOMMUFD (/dev/iommu is absent)"

# iommufd_variants TEST: the variants of TEST's fixtures that use iommufd (from its -l).
iommufd_variants() {
    "$SELFTESTS_DIR/$1" -l "$addr" 2>&1 | tr -s ' \t' '\n\n' | grep '^iommufd' | sort -u
}

# vfio_dma_mapping_test maps 2 MiB and 1 GiB huge pages; the guest has RAM for a few 2 MiB ones.
echo "${BELFRY_HUGEPAGES:-8}" >"$PROC/sys/vm/nr_hugepages" 2>/dev/null || note "no huge pages reserved"
# vfio_pci_driver_test maps a 1 GiB shared anonymous (shmem) region: with transparent huge
# pages the vIOMMU maps it in 2 MiB pages (512 DMA_MAPs to the device instead of 262,144 of
# 4 KiB, which would neither fit the test's timeout nor the device's 65,535 windows).
for thp in enabled shmem_enabled; do
    echo always >"$SYSFS/kernel/mm/transparent_hugepage/$thp" 2>/dev/null || note "transparent huge pages ($thp) left as they are"
done

for test in "$@"; do
    note "selftest $test on $addr"
    results "BELFRY-SELFTEST-BEGIN $test"
    excluded=''
    if [ ! -e /dev/iommu ]; then
        if [ "$test" = vfio_iommufd_setup_test ]; then
            results "# BELFRY-SKIP $test: $NO_IOMMUFD"
            results "BELFRY-SELFTEST-END $test 4"
            continue
        fi
        for variant in $(iommufd_variants "$test"); do
            results "# BELFRY-SKIP $test.$variant: $NO_IOMMUFD"
            excluded="$excluded -V $variant"
        done
    fi
    # shellcheck disable=SC2086  # the -V options
    if [ -n "$BELFRY_RESULTS" ]; then
        "$SELFTESTS_DIR/$test" $excluded "$addr" >"$BELFRY_RESULTS" 2>&1
    else
        "$SELFTESTS_DIR/$test" $excluded "$addr" 2>&1
    fi
    status=$?
    results "BELFRY-SELFTEST-END $test $status"
    # 4 is kselftest's "skipped".
    [ "$status" -eq 0 ] || [ "$status" -eq 4 ] || fail "$test exited with status $status"
done
[ "$FAILURES" -eq 0 ]
