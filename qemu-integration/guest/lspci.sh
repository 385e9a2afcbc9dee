#!/bin/sh
# lspci.sh [ADDR...]: an `lspci -vv -nn`-style listing of each Belfry device (default: all),
# read from sysfs only (vendor, device, class, revision, subsystem, command register, BAR
# sizes from `resource`, MSI/MSI-X vector count, the capability lists walked in `config`,
# the bound driver). Deterministic for a given device configuration: no bus addresses
# beyond the leading one, no IRQ numbers, no BAR addresses.
. "$(dirname "$0")/lib.sh"

# Forks are dear in the guest (lib.sh): sysfs files are read with the `read` builtin and the
# helpers set variables, so a device's listing forks once (od), and one awk formats every
# device: the shell writes each device's lines for it to the same pipe, tagged (`H` a line to
# print as it is, `R` the Region lines, `N` the vector count, `E` the end and the driver line),
# with the device's config space in between as od prints it, in little-endian 32-bit words (a
# quarter of the numbers bytes would be: the parsing of 16 config spaces was most of the
# listing's time).

# size_text BYTES: SIZE is 64K / 16M / 1G / 512 (as lspci).
size_text() {
    SIZE=$1
    for unit in G M K; do
        case $unit in G) u=1073741824 ;; M) u=1048576 ;; K) u=1024 ;; esac
        if [ "$1" -ge "$u" ] && [ $(($1 % u)) -eq 0 ]; then
            SIZE="$(($1 / u))$unit"
            return
        fi
    done
}

# class_name CLASS: CLASS_NAME is the name of the 16-bit class code CLASS.
class_name() {
    case $1 in
        768) CLASS_NAME="VGA compatible controller" ;;
        769) CLASS_NAME="XGA compatible controller" ;;
        770) CLASS_NAME="3D controller" ;;
        896) CLASS_NAME="Display controller" ;;
        *) CLASS_NAME=$(printf 'Class %04x' "$1") ;;
    esac
}

list_device() {
    a=$1
    d=$SYSFS/bus/pci/devices/$a
    read -r class <"$d/class"
    read -r vendor <"$d/vendor"
    read -r device <"$d/device"
    read -r rev <"$d/revision"
    read -r svendor <"$d/subsystem_vendor"
    read -r sdevice <"$d/subsystem_device"
    class16=$((class >> 8))
    class_name "$class16"
    printf 'H %s %s [%04x]: Device [%04x:%04x] (rev %02x)\n' "${a#0000:}" "$CLASS_NAME" "$class16" \
        $((vendor)) $((device)) $((rev))
    printf 'H \tSubsystem: Device [%04x:%04x]\n' $((svendor)) $((sdevice))

    # The Region lines, '|'-separated, for the awk (which prints the Control line first).
    regions=
    i=0
    while read -r start end flags; do
        [ $i -le 5 ] || break
        if [ $((start)) -ne 0 ] || [ $((end)) -ne 0 ]; then
            f=$((flags))
            size_text $((end - start + 1))
            if [ $((f & 0x100)) -ne 0 ]; then
                regions="$regions|Region $i: I/O ports [size=$SIZE]"
            else
                bits=32-bit
                [ $((f & 0x100000)) -ne 0 ] && bits=64-bit
                pf=non-prefetchable
                [ $((f & 0x2000)) -ne 0 ] && pf=prefetchable
                regions="$regions|Region $i: Memory, $bits, $pf [size=$SIZE]"
            fi
        fi
        i=$((i + 1))
    done <"$d/resource"

    device_irqs "$a"
    nirq=0
    for irq in $IRQS; do
        nirq=$((nirq + 1))
    done

    echo "R $regions"
    echo "N $nirq"
    od -An -v -tu4 "$d/config"
    driver=
    for drv in "$SYSFS"/bus/pci/drivers/*/"$a"; do
        [ -e "$drv" ] || continue
        drv=${drv%/*}
        driver="	Kernel driver in use: ${drv##*/}"
    done
    echo "E $driver"
}

# format_devices: the listing of the devices whose tagged lines (list_device) come on stdin.
format_devices() {
    awk '
        /^H / { print substr($0, 3); next }
        /^R / { regions = substr($0, 3); next }
        /^N / { nirq = $2 + 0; next }
        /^E/ { device(); if (length($0) > 2) print substr($0, 3); n = 0; split("", w); next }
        { for (i = 1; i <= NF; i++) { w[n / 4] = $i + 0; n += 4 } }
        function b(o) { return and(rshift(w[int(o / 4)], 8 * (o % 4)), 255) }
        function w16(o) { return b(o) + 256 * b(o + 1) }
        function w32(o) { return w16(o) + 65536 * w16(o + 2) }
        function pm(x) { return x ? "+" : "-" }
        function device(    cmd, nr, r, i, p, guard, id, c, t, names, nm, tb, pba, ext, h, name) {
            cmd = w16(4)
            printf "\tControl: I/O%s Mem%s BusMaster%s DisINTx%s\n", pm(and(cmd, 1)), pm(and(cmd, 2)), pm(and(cmd, 4)), pm(and(cmd, 1024))
            nr = split(regions, r, "|")
            for (i = 2; i <= nr; i++) printf "\t%s\n", r[i]
            printf "\tInterrupt vectors allocated: %d\n", nirq
            if (and(w16(6), 16)) {
                p = and(b(52), 252); guard = 0
                while (p >= 64 && guard++ < 48) {
                    id = b(p)
                    if (id == 1) {
                        printf "\tCapabilities: [%02x] Power Management version %d\n", p, and(w16(p + 2), 7)
                    } else if (id == 5) {
                        c = w16(p + 2)
                        printf "\tCapabilities: [%02x] MSI: Enable%s Count=%d 64bit%s\n", p, pm(and(c, 1)), 2 ^ and(rshift(c, 1), 7), pm(and(c, 128))
                    } else if (id == 16) {
                        c = w16(p + 2); t = and(rshift(c, 4), 15)
                        split("Endpoint,Legacy Endpoint,?,?,Root Port,Upstream Port,Downstream Port,PCI-Express to PCI/PCI-X Bridge,PCI/PCI-X to PCI-Express Bridge,Root Complex Integrated Endpoint,Root Complex Event Collector", names, ",")
                        nm = names[t + 1]
                        if (nm == "" || nm == "?") nm = "type " t
                        printf "\tCapabilities: [%02x] Express (v%d) %s\n", p, and(c, 15), nm
                    } else if (id == 17) {
                        c = w16(p + 2); tb = w32(p + 4); pba = w32(p + 8)
                        printf "\tCapabilities: [%02x] MSI-X: Enable%s Count=%d Masked%s\n", p, pm(and(c, 32768)), and(c, 2047) + 1, pm(and(c, 16384))
                        printf "\t\tVector table: BAR=%d offset=%08x\n", and(tb, 7), tb - and(tb, 7)
                        printf "\t\tPBA: BAR=%d offset=%08x\n", and(pba, 7), pba - and(pba, 7)
                    } else if (id == 9) {
                        printf "\tCapabilities: [%02x] Vendor Specific Information: Len=%02x\n", p, b(p + 2)
                    } else {
                        printf "\tCapabilities: [%02x] Capability ID %02x\n", p, id
                    }
                    p = and(b(p + 1), 252)
                }
            }
            if (n > 256) {
                split("Advanced Error Reporting,Virtual Channel,Device Serial Number,Power Budgeting,Root Complex Link,Root Complex Internal Link,Root Complex Event Collector,Multi-Function VC,Virtual Channel,RCRB,Vendor Specific,?,Access Control Services,Alternative Routing-ID Interpretation,Address Translation Service,Single Root I/O Virtualization,?,Multicast,Page Request Interface,?,Resizable BAR,Dynamic Power Allocation,Transaction Processing Hints,Latency Tolerance Reporting,Secondary PCI Express", ext, ",")
                p = 256; guard = 0
                while (p >= 256 && guard++ < 200) {
                    h = w32(p)
                    if (h == 0 || h == 4294967295) break
                    id = and(h, 65535)
                    name = (id >= 1 && id <= 25 && ext[id] != "?") ? ext[id] : sprintf("Extended Capability ID %04x", id)
                    printf "\tCapabilities: [%03x v%d] %s\n", p, and(rshift(h, 16), 15), name
                    p = and(rshift(h, 20), 4092)
                }
            }
        }'
}

if [ $# -eq 0 ]; then
    set -- $(belfry_devices)
fi
for a in "$@"; do
    list_device "$a"
done | format_devices
