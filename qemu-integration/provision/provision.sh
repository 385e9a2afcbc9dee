#!/usr/bin/env bash
# Belfry provisioning: a Debian trixie root (QEMU with vfio-user, kernel toolchain),
# the Rust-enabled guest kernel, out-of-tree module builds, QEMU launching and the
# guest initramfs. See README.md next to this file.
#
# Contract: progress and logs go to stderr as "[provision] ..." lines; the answer
# goes to stdout as exactly one line. Exit status 0 = success.
#
#   provision.sh root                       -> /CACHE/roots/trixie-KEY/rootfs
#   provision.sh kernel [distro|debug|kcsan] -> /CACHE/kernels/distro-UNAME-KEY | linux-VER-KEY
#                                              | linux-VER-kcsan-KEY
#   provision.sh kmod SRC_DIR [MAKE_ARGS..] -> /REPO/target/kmod/FLAVOUR[-ARGS]/x.ko [...]
#   provision.sh qemu                       -> "host /path/to/qemu" | "root /path/to/rootfs"
#   provision.sh run-qemu [--bind DIR]... -- QEMU_ARGS...   (execs QEMU; no stdout line)
#   provision.sh initramfs OUT.cpio [--add HOST:GUEST]... -> /abs/OUT.cpio
#   provision.sh cc OUT SRC.c [GCC_ARGS..]  -> /abs/OUT (static guest program, the root's gcc)
#   provision.sh vfio-modules OUT_DIR       -> /abs/OUT_DIR/x.ko ... (the distro image's VFIO
#                                              modules, in load order)
#   provision.sh vfio-selftests OUT_DIR [PLUGIN_DIR] -> /abs/OUT_DIR (Linux's VFIO selftests,
#                                              static, with an extra driver plugin)
#   provision.sh status                     -> KEY=VALUE lines (what is cached; builds nothing)
#   provision.sh all                        -> ROOTFS DISTRO_TREE DEBUG_TREE (everything, as root)
#
# Kernel flavours: `distro` (the default) boots Debian's packaged image and builds only the
# rust/ metadata a module needs; `debug` is built from source with the debug options;
# `kcsan` is the debug options with KCSAN, the data-race detector, in place of KASAN (the two
# exclude each other; not in `all`, not in ci/test).
# BELFRY_KERNEL_FLAVOUR=distro|debug|kcsan picks the flavour of `kernel` (without an argument)
# and of `kmod`.
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
QI_DIR=$(dirname "$HERE")                    # qemu-integration/
KCONF_DIR=$QI_DIR/kernel
# The cache: $BELFRY_CACHE, else /var/cache/belfry (shared) for root or whoever may write it,
# else one's own under $XDG_CACHE_HOME.
if [[ -n ${BELFRY_CACHE:-} ]]; then
    CACHE=$BELFRY_CACHE
elif ((EUID == 0)) || [[ -w /var/cache/belfry || (! -e /var/cache/belfry && -w /var/cache) ]]; then
    CACHE=/var/cache/belfry
else
    CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/belfry
fi
MIRROR=${BELFRY_DEBIAN_MIRROR:-http://deb.debian.org/debian}

log() { printf '[provision] %s\n' "$*" >&2; }

# The one command, run once as root, that provisions everything `cargo belfry conformance`
# (either kernel) and ci/test need: the root and both kernel flavours. Building them needs
# root (mmdebstrap --mode=root and apt in a chroot; the kernels are built inside that root);
# runs do not. The estimate (README.md next to this file has the measurements): root 76-210 s,
# distro kernel 711-1,346 s, debug kernel 472 s on quiet cores and 1,839-5,172 s on busy ones;
# root 2.3 GiB + distro 1.3 GiB + debug 2.2 GiB.
ROOT_COMMAND_ESTIMATE='25 min on 2 quiet cores, up to 2 h on busy ones; 6 GiB'
root_command() { printf 'sudo env BELFRY_CACHE=%q %q all' "$CACHE" "$SELF"; }
# Stops an ordinary user who would need WHAT built, with the command.
needs_root() {
    die "$1 is not provisioned, and building it needs root (mmdebstrap --mode=root and apt in a chroot; the guest kernels are built inside that root). Run once, as root ($ROOT_COMMAND_ESTIMATE): $(root_command)   (it provisions the root and both guest kernels; later runs need no root)"
}
# notice: something the user must see even when the launcher keeps the log quiet (it shows
# "[provision] notice:" lines on the terminal): what is installed on the host, and why.
notice() { printf '[provision] notice: %s\n' "$*" >&2; }
die() { printf '[provision] error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- helpers

# Read key=value lines of qemu-integration/kernel/linux-version.
LINUX_SERIES='' LINUX_PKG='' LINUX_DISTRO=''
read_linux_version() {
    local f=$KCONF_DIR/linux-version k v
    [[ -r $f ]] || die "missing $f"
    while IFS='=' read -r k v; do
        case $k in
            series) LINUX_SERIES=$v ;;
            package) LINUX_PKG=$v ;;
            distro) LINUX_DISTRO=$v ;;
        esac
    done < <(grep -Ev '^[[:space:]]*(#|$)' "$f")
    [[ -n $LINUX_SERIES && -n $LINUX_PKG && -n $LINUX_DISTRO ]] || die "$f must define series=, package= and distro="
}

sha() { sha256sum | cut -c1-16; }

# Take an exclusive flock on $CACHE/locks/NAME.lock into global LOCK_FD.
LOCK_FD=''
lock_take() {
    mkdir -p "$CACHE/locks"
    exec {LOCK_FD}>"$CACHE/locks/$1.lock"
    if ! flock -n "$LOCK_FD"; then
        log "$1: another provision.sh holds the lock, waiting"
        flock "$LOCK_FD"
    fi
}
lock_release() { [[ -n $LOCK_FD ]] && exec {LOCK_FD}>&-; LOCK_FD=''; }

# Temp dirs removed on exit unless renamed into place.
CLEANUP=()
BG_PID=''
# shellcheck disable=SC2317  # invoked by the EXIT trap
on_exit() {
    local d
    if [[ -n $BG_PID ]]; then kill -TERM -- "-$BG_PID" 2>/dev/null || kill -TERM "$BG_PID" 2>/dev/null || true; wait "$BG_PID" 2>/dev/null || true; fi
    for d in "${CLEANUP[@]}"; do [[ -e $d ]] && rm -rf --one-file-system -- "$d"; done
    return 0
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run_progress LABEL WHAT STEP EST_SECONDS LOG COUNT_CMD EXPECTED -- CMD...
# Runs CMD in the background (own process group) with output to LOG and prints
#   [provision] LABEL: WHAT (STEP, N s elapsed[, n/m objects], ~M min left)
# every 20 s. COUNT_CMD (a shell snippet, may be '') prints the units done so far,
# EXPECTED is the number expected (0 = unknown: the estimate is EST_SECONDS).
run_progress() {
    local label=$1 what=$2 step=$3 est=$4 logf=$5 count_cmd=$6 expected=$7 t_start=$SECONDS
    local next rc n left spent extra
    shift 8
    setsid "$@" >"$logf" 2>&1 &
    BG_PID=$!
    # If this script is SIGKILLed, nobody runs on_exit: a watcher ends the job then, so
    # no orphaned build keeps running (and keeps holding the inherited lock).
    (
        trap - EXIT INT TERM
        [[ -n $LOCK_FD ]] && exec {LOCK_FD}>&-
        while kill -0 "$$" 2>/dev/null && kill -0 "$BG_PID" 2>/dev/null; do sleep 2; done
        if ! kill -0 "$$" 2>/dev/null && kill -0 "$BG_PID" 2>/dev/null; then kill -TERM -- "-$BG_PID"; fi
    ) </dev/null >/dev/null 2>&1 &
    next=$((SECONDS + 20))
    while kill -0 "$BG_PID" 2>/dev/null; do
        sleep 1
        ((SECONDS >= next)) || continue
        next=$((SECONDS + 20))
        spent=$((SECONDS - t_start)) extra='' left=$((est - spent))
        if [[ -n $count_cmd ]]; then
            n=$(bash -c "$count_cmd" 2>/dev/null || echo 0)
            if ((expected > 0 && n > 0)); then
                left=$((spent * (expected - n) / n)) extra=", $n/$expected objects"
            else
                extra=", $n objects"
            fi
        fi
        if ((left >= 10)); then
            log "$label: $what ($step, $spent s elapsed$extra, ~$(((left + 59) / 60)) min left)"
        else
            # Past the estimate with nothing to count against: say so rather than "~1 min".
            log "$label: $what ($step, $spent s elapsed$extra, past the ~$(((est + 59) / 60)) min of a quiet machine)"
        fi
    done
    rc=0; wait "$BG_PID" || rc=$?
    BG_PID=''
    if ((rc != 0)); then
        log "$label: $what failed (exit $rc); last lines of $logf:"
        tail -n 40 "$logf" >&2
        return "$rc"
    fi
}

# in_root ROOTFS [--bind DIR]... [--stage SRC DST] [--proc] [--dev] [--as UID:GID] [--cwd DIR] -- CMD...
# Runs CMD chrooted in ROOTFS inside a private mount namespace (unshare -m): every
# mount made for it disappears with the namespace, none is ever visible on the host.
# Execs (no fork): the caller's PID becomes CMD's PID.
in_root() {
    local -a ns=(unshare -m)
    ((EUID == 0)) || ns=(unshare -r -m)
    exec "${ns[@]}" -- "$SELF" __ns "$@"
}

# Creates directory PATH inside ROOT for a bind mount. An ordinary user (root only inside a user
# namespace) cannot create it where the root-owned ROOT has no such directory: the first parent
# that refuses is then shadowed, in this mount namespace only, by a tmpfs holding bind mounts of
# its entries, so the new directory can be made beside them (unprivileged overlayfs cannot copy
# up directories whose owner is unmapped). A component that is a symlink inside ROOT is refused:
# it would be followed on the host (an absolute one) or put the mount elsewhere than PATH.
make_mount_point() {
    local root=$1 path=$2 p comp
    p=$root
    IFS=/ read -ra comps <<<"${path#/}"
    for comp in "${comps[@]}"; do
        [[ -n $comp ]] || continue
        [[ -L $p/$comp ]] && die "cannot bind $path inside the root: ${p#"$root"}/$comp is a symlink there"
        # Another run starting beside this one (a run's guests boot together) may make the
        # same directory between the test and the mkdir: one that exists then is no failure.
        if [[ ! -e $p/$comp ]] && ! mkdir "$p/$comp" 2>/dev/null && [[ ! -d $p/$comp ]]; then
            shadow_dir "$p"
            mkdir "$p/$comp"
        fi
        p=$p/$comp
    done
}

# Replaces directory DIR (in this mount namespace) by a writable tmpfs whose entries are bind
# mounts (directories) or copies (files, symlinks) of DIR's. The entries are recursive binds of
# a recursive bind of DIR: what is already mounted below DIR (the binds made before this one)
# stays visible.
shadow_dir() {
    local dir=$1 orig e n
    orig=$(mktemp -d "${TMPDIR:-/tmp}/belfry-shadow.XXXXXX")
    mount --rbind "$dir" "$orig"
    mount -t tmpfs -o mode=0755 belfry-shadow "$dir"
    for e in "$orig"/* "$orig"/.[!.]*; do
        [[ -e $e || -L $e ]] || continue
        n=${e##*/}
        if [[ -d $e && ! -L $e ]]; then
            mkdir "$dir/$n"
            mount --rbind "$e" "$dir/$n"
        else
            cp -a --no-preserve=ownership "$e" "$dir/$n"
        fi
    done
    umount -R "$orig" && rmdir "$orig"
}

# The paths at which DIR appears inside the root: as the caller spelled it (made absolute,
# `.` and `..` removed, symlinks kept: the caller hands QEMU or make paths spelled so) and, if
# different, with every symlink resolved. Both show the resolved directory.
bind_targets() {
    local spelled resolved
    spelled=$(realpath -s -m -- "$1")
    resolved=$(readlink -f -- "$1")
    printf '%s\n' "$spelled"
    [[ $resolved == "$spelled" ]] || printf '%s\n' "$resolved"
}

# The part of in_root that runs inside the new namespace.
ns_main() {
    local root=$1 proc=0 dev=0 as='' cwd=/ stage_src='' stage_dst='' d
    local -a binds=()
    shift
    while (($#)); do
        case $1 in
            --bind) binds+=("$2"); shift 2 ;;
            --stage) stage_src=$2 stage_dst=$3; shift 3 ;;
            --proc) proc=1; shift ;;
            --dev) dev=1; shift ;;
            --as) as=$2; shift 2 ;;
            --cwd) cwd=$2; shift 2 ;;
            --) shift; break ;;
            *) die "__ns: bad option $1" ;;
        esac
    done
    # chroot is in /usr/sbin, which an ordinary user's PATH may lack.
    PATH=$PATH:/usr/sbin:/sbin
    mount --make-rprivate /
    ((proc)) && mount --rbind /proc "$root/proc"
    ((dev)) && mount --rbind /dev "$root/dev"
    # Every bound directory at each of its paths (bind_targets), parents before children so
    # nested binds stack correctly.
    local -a targets=()
    for d in "${binds[@]}"; do
        [[ -d $d ]] || die "__ns: --bind $d: not a directory"
        mapfile -t -O "${#targets[@]}" targets < <(bind_targets "$d")
    done
    while IFS= read -r d; do
        [[ -n $d ]] || continue
        make_mount_point "$root" "$d"
        mount --bind "$d" "$root$d"
    done < <(printf '%s\n' "${targets[@]}" | awk '!seen[$0]++ { print length($0) "\t" $0 }' | sort -n | cut -f2-)
    if [[ -n $stage_src ]]; then
        # Make SRC appear at DST inside the root only (DST's parent gets a private tmpfs).
        mkdir -p "$root$(dirname "$stage_dst")"
        mount -t tmpfs -o mode=0755 belfry-stage "$root$(dirname "$stage_dst")"
        mkdir -p "$root$stage_dst"
        mount --bind "$stage_src" "$root$stage_dst"
    fi
    [[ -d $root$cwd ]] || cwd=/
    local -a user=()
    [[ -n $as ]] && user=(--userspec="$as")
    exec chroot "${user[@]}" "$root" /usr/bin/env -i --chdir="$cwd" \
        PATH=/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin HOME=/tmp LANG=C.UTF-8 TERM=dumb "$@"
}

# Runs in_root in a subshell so the caller continues (for build steps).
root_run() { (in_root "$@"); }

# ---------------------------------------------------------------- root

QEMU_PKGS=(qemu-system-x86 busybox-static)
TOOL_PKGS=(build-essential bc bison flex libelf-dev libssl-dev cpio kmod xz-utils python3
           rustc rust-src bindgen libclang-dev rust-clippy pahole clang lld llvm)
# rustc/rust-src/rust-clippy, bindgen, libclang and clang/lld/llvm come from plain trixie (1.85.1,
# 0.71.1, 19) even though the root's default release is trixie-backports (QEMU, seabios,
# linux-source). The `debug` kernel is built with LLVM=1: with CONFIG_RUST, KASAN needs a clang
# kernel (init/Kconfig: `depends on !KASAN || CC_IS_CLANG`), and clang 19 matches rustc's LLVM 19.
ROOT_PREFS='Package: src:rustc src:rust-bindgen-cli src:llvm-defaults
Pin: release n=trixie
Pin-Priority: 995
'

root_packages() {
    read_linux_version
    printf '%s\n' "${QEMU_PKGS[@]}" "${TOOL_PKGS[@]}" "linux-source-$LINUX_SERIES=$LINUX_PKG"
}

# The recipe: its text (declare -f) is part of the root key.
# The root is built in a temporary directory and renamed when complete, so dpkg's
# force-unsafe-io (no fsync per unpacked file) loses nothing on a crash: the next run starts
# again. It saves minutes on a busy disk.
root_recipe_mmdebstrap() {
    local tmp=$1 prefs=$2
    local -a inc
    mapfile -t inc < <(root_packages)
    unshare -m -- mmdebstrap --mode=root --variant=apt \
        --dpkgopt=force-unsafe-io \
        --aptopt='APT::Install-Recommends "false"' \
        --aptopt='APT::Default-Release "trixie-backports"' \
        --setup-hook="mkdir -p \"\$1/etc/apt/preferences.d\" && cp '$prefs' \"\$1/etc/apt/preferences.d/belfry.pref\"" \
        --include="$(IFS=,; echo "${inc[*]}")" \
        --skip=cleanup/apt/lists \
        trixie "$tmp" "deb $MIRROR trixie main" "deb $MIRROR trixie-backports main"
}

root_recipe_debootstrap() {
    local tmp=$1 prefs=$2
    local -a inc
    mapfile -t inc < <(root_packages)
    unshare -m -- debootstrap --variant=minbase trixie "$tmp" "$MIRROR"
    printf 'deb %s trixie main\ndeb %s trixie-backports main\n' "$MIRROR" "$MIRROR" >"$tmp/etc/apt/sources.list"
    printf 'APT::Install-Recommends "false";\nAPT::Default-Release "trixie-backports";\n' >"$tmp/etc/apt/apt.conf.d/99belfry"
    cp "$prefs" "$tmp/etc/apt/preferences.d/belfry.pref"
    # shellcheck disable=SC2016  # expanded by the inner sh
    unshare -m -- sh -c 'mount --rbind /proc "$1/proc" && mount --rbind /dev "$1/dev" && shift &&
        chroot "$0" apt-get update && DEBIAN_FRONTEND=noninteractive chroot "$0" apt-get -o Dpkg::Options::=--force-unsafe-io install -y "$@" &&
        chroot "$0" apt-get clean' "$tmp" "$tmp" "${inc[@]}"
}

# After install: static gen_init_cpio (runs on any host) and version checks.
root_recipe_finish() {
    local tmp=$1
    root_run "$tmp" --proc -- sh -euc '
        tar -I "xz -T0" -xOf /usr/src/linux-source-'"$LINUX_SERIES"'.tar.xz --occurrence=1 --wildcards "*/usr/gen_init_cpio.c" >/tmp/gen_init_cpio.c
        gcc -O2 -static -o /usr/local/bin/gen_init_cpio /tmp/gen_init_cpio.c
        rm -f /tmp/gen_init_cpio.c'
}

root_key() {
    read_linux_version
    {
        root_packages
        printf '%s' "$ROOT_PREFS"
        declare -f root_recipe_mmdebstrap root_recipe_debootstrap root_recipe_finish
    } | sha
}

ROOT_DIR='' ROOTFS=''
ensure_root() {
    local key tmp prefs t
    key=$(root_key)
    ROOT_DIR=$CACHE/roots/trixie-$key
    ROOTFS=$ROOT_DIR/rootfs
    [[ -f $ROOT_DIR/manifest ]] && return 0
    ((EUID == 0)) || needs_root "the provisioning root (Debian trixie with QEMU and the kernel toolchain)"
    lock_take "root-$key"
    if [[ -f $ROOT_DIR/manifest ]]; then lock_release; return 0; fi
    [[ -e $ROOT_DIR ]] && die "$ROOT_DIR exists without manifest; remove it"
    rm -rf --one-file-system "$CACHE/roots/.tmp-trixie-$key".*   # interrupted earlier attempts
    tmp=$CACHE/roots/.tmp-trixie-$key.$$
    CLEANUP+=("$tmp")
    mkdir -p "$tmp"
    prefs=$tmp/belfry.pref
    printf '%s' "$ROOT_PREFS" >"$prefs"
    t=$SECONDS
    if ! command -v mmdebstrap >/dev/null && ! command -v debootstrap >/dev/null; then
        notice "installing mmdebstrap on the host (apt-get install --no-install-recommends mmdebstrap): it bootstraps the provisioning root; nothing else on the host changes"
        apt-get install -y --no-install-recommends mmdebstrap >&2 ||
            notice "mmdebstrap could not be installed; trying debootstrap"
    fi
    if command -v mmdebstrap >/dev/null && [[ ${BELFRY_BOOTSTRAP:-} != debootstrap ]]; then
        log "root: mmdebstrap trixie + trixie-backports into $tmp (step 1/2, ~1.5 min)"
        run_progress root mmdebstrap "step 1/2" 90 "$tmp/bootstrap.log" '' 0 -- \
            "$SELF" __recipe mmdebstrap "$tmp/rootfs" "$prefs"
    else
        if ! command -v debootstrap >/dev/null; then
            notice "installing debootstrap on the host (apt-get install --no-install-recommends debootstrap) to bootstrap the provisioning root"
            apt-get install -y --no-install-recommends debootstrap >&2
        fi
        log "root: debootstrap trixie into $tmp (step 1/2, ~3 min)"
        run_progress root debootstrap "step 1/2" 180 "$tmp/bootstrap.log" '' 0 -- \
            "$SELF" __recipe debootstrap "$tmp/rootfs" "$prefs"
    fi
    log "root: gen_init_cpio and version checks (step 2/2, $((SECONDS - t)) s elapsed)"
    root_recipe_finish "$tmp/rootfs"
    write_root_manifest "$tmp/rootfs" "$key" "$((SECONDS - t))" >"$tmp/manifest.new"
    mv "$tmp/manifest.new" "$tmp/manifest"
    mv -T "$tmp" "$ROOT_DIR"
    lock_release
    log "root: ready in $((SECONDS - t)) s: $ROOTFS ($(du -sh --one-file-system "$ROOTFS" | cut -f1))"
}

# shellcheck disable=SC2016  # ${Version} is dpkg-query's format, not ours
pkgver() { chroot "$1" dpkg-query -W -f='${Version}' "$2" 2>/dev/null || echo none; }

write_root_manifest() {
    local r=$1 rustc bindgen qemu qver vfio
    rustc=$(pkgver "$r" rustc)
    bindgen=$(pkgver "$r" bindgen)
    qemu=$(pkgver "$r" qemu-system-x86)
    [[ $rustc == 1.85.* ]] || die "root: rustc is $rustc, expected 1.85.x from trixie"
    [[ $(pkgver "$r" rust-src) == "$rustc" ]] || die "root: rust-src $(pkgver "$r" rust-src) != rustc $rustc"
    [[ $bindgen == 0.71.* ]] || die "root: bindgen is $bindgen, expected 0.71.x"
    [[ $(pkgver "$r" "linux-source-$LINUX_SERIES") == "$LINUX_PKG" ]] || die "root: linux-source mismatch"
    qver=$(chroot "$r" qemu-system-x86_64 --version | head -n1)
    vfio=no
    chroot "$r" qemu-system-x86_64 -device help 2>/dev/null | grep -q '"vfio-user-pci"' && vfio=yes
    [[ $vfio == yes ]] || die "root: $qver has no vfio-user-pci"
    cat <<EOF
key=$2
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
seconds=$3
rustc=$rustc
rust-src=$(pkgver "$r" rust-src)
rust-clippy=$(pkgver "$r" rust-clippy)
pahole=$(pkgver "$r" pahole)
bindgen=$bindgen
libclang=$(pkgver "$r" libclang-dev)
gcc=$(pkgver "$r" gcc-14)
linux-source=$(pkgver "$r" "linux-source-$LINUX_SERIES")
qemu-system-x86=$qemu
qemu-version=$qver
qemu-vfio-user-pci=$vfio
seabios=$(pkgver "$r" seabios)
busybox-static=$(pkgver "$r" busybox-static)
EOF
}

manifest_get() { sed -n "s/^$2=//p" "$1" | head -n1; }

# ---------------------------------------------------------------- kernel

KBUILD_TARGETS=(bzImage modules)
KMAKE=(make ARCH=x86_64 KBUILD_BUILD_USER=belfry KBUILD_BUILD_HOST=belfry)
# The `debug` flavour's toolchain (see TOOL_PKGS): also every module build against it.
DEBUG_MAKE_ARGS=(LLVM=1)

kernel_recipe() {
    # Steps run inside the root; $K is the tree's path there (== its final host path).
    local step=$1 K=$2
    case $step in
        extract) echo "tar -xJf /usr/src/linux-source-$LINUX_SERIES.tar.xz --strip-components=1 -C $K" ;;
        config) echo "cd $K && ${KMAKE[*]} ${DEBUG_MAKE_ARGS[*]} rustavailable && ${KMAKE[*]} ${DEBUG_MAKE_ARGS[*]} tinyconfig &&
                      scripts/kconfig/merge_config.sh -m .config .belfry.config && ${KMAKE[*]} ${DEBUG_MAKE_ARGS[*]} olddefconfig" ;;
        build) echo "cd $K && ${KMAKE[*]} ${DEBUG_MAKE_ARGS[*]} -j$(($(nproc) + 1)) ${KBUILD_TARGETS[*]}" ;;
    esac
}

kernel_key() {
    local m=$ROOT_DIR/manifest t
    {
        echo "linux-source=$(manifest_get "$m" linux-source)"
        printf '%s' "$FRAGMENT" | sha256sum
        for t in rustc rust-src bindgen libclang gcc; do echo "$t=$(manifest_get "$m" "$t")"; done
        declare -f kernel_recipe
        echo "${KBUILD_TARGETS[*]} ${KMAKE[*]} ${DEBUG_MAKE_ARGS[*]}"
    } | sha
}

# Every CONFIG_ line of the fragment must hold in .config.
verify_config() {
    local frag=$1 cfg=$2 line sym val bad=()
    while IFS= read -r line; do
        if [[ $line =~ ^(CONFIG_[A-Za-z0-9_]+)=(.*)$ ]]; then
            sym=${BASH_REMATCH[1]} val=${BASH_REMATCH[2]}
            grep -qxF "$sym=$val" "$cfg" || bad+=("$sym=$val (got: $(grep -E "^$sym=|^# $sym is not set" "$cfg" || echo absent))")
        elif [[ $line =~ ^#\ (CONFIG_[A-Za-z0-9_]+)\ is\ not\ set ]]; then
            sym=${BASH_REMATCH[1]}
            grep -qE "^$sym=" "$cfg" && bad+=("$sym off (got: $(grep -E "^$sym=" "$cfg"))")
        fi
    done <"$frag"
    if ((${#bad[@]})); then
        log "kernel: ${#bad[@]} option(s) of belfry.config did not survive olddefconfig (missing dependencies):"
        printf '[provision]   %s\n' "${bad[@]}" >&2
        return 1
    fi
}

KTREE='' FRAGMENT=''
FLAVOUR=${BELFRY_KERNEL_FLAVOUR:-distro}
set_flavour() {
    case $1 in
        distro|debug|kcsan) FLAVOUR=$1 ;;
        *) die "unknown kernel flavour '$1' (distro, debug or kcsan)" ;;
    esac
}

# The guest kernel tree of $FLAVOUR, built if missing: sets KTREE.
ensure_kernel() {
    set_flavour "$FLAVOUR"
    case $FLAVOUR in
        distro) ensure_kernel_distro ;;
        debug|kcsan) ensure_kernel_source ;;
    esac
}

# The configuration fragment of a flavour built from source: belfry.config for `debug`; for
# `kcsan`, belfry.config without the options kcsan.config names, then kcsan.config.
flavour_fragment() {
    local base=$KCONF_DIR/belfry.config overlay=$KCONF_DIR/kcsan.config syms
    case $1 in
        debug) cat "$base" ;;
        kcsan)
            syms=$(grep -oE '^(# )?CONFIG_[A-Za-z0-9_]+' "$overlay" | sed 's/^# //' | sort -u | paste -sd'|')
            grep -vE "^(# )?($syms)( is not set|=)" "$base"
            cat "$overlay" ;;
        *) die "flavour_fragment: $1 is not built from source" ;;
    esac
}

# The tree name of a flavour built from source, for cache key KEY.
source_tree_name() {
    local ver=${LINUX_PKG%%-*}
    case $1 in
        debug) echo "linux-$ver-$2" ;;
        *) echo "linux-$ver-$1-$2" ;;
    esac
}

# The start of building kernel tree NAME (cache key KEY) of either flavour: sets KTREE. If the
# tree is built (also by another process while this one waited for the lock), KTMP is empty;
# else the lock is held and KTMP is a fresh staging directory, removed on exit unless renamed.
KTMP=''
kernel_build_begin() {
    local name=$1 key=$2
    KTREE=$CACHE/kernels/$name KTMP=''
    [[ -f $KTREE/.belfry-manifest ]] && return 0
    ((EUID == 0)) || needs_root "the $FLAVOUR guest kernel"
    lock_take "kernel-$key"
    if [[ -f $KTREE/.belfry-manifest ]]; then lock_release; return 0; fi
    [[ -e $KTREE ]] && die "$KTREE exists without .belfry-manifest; remove it"
    rm -rf --one-file-system "$CACHE/kernels/.tmp-$name".*
    KTMP=$CACHE/kernels/.tmp-$name.$$
    CLEANUP+=("$KTMP")
    mkdir -p "$KTMP" "$ROOTFS$CACHE/kernels"
}

# The flavours built from linux-source (`debug`, `kcsan`): tinyconfig + the flavour's fragment.
ensure_kernel_source() {
    local key name tmp t t3 expected stats
    ensure_root
    # One snapshot of the fragment is hashed, merged and verified (it may be edited meanwhile).
    FRAGMENT=$(flavour_fragment "$FLAVOUR")
    key=$(kernel_key)
    name=$(source_tree_name "$FLAVOUR" "$key")
    kernel_build_begin "$name" "$key"
    [[ -n $KTMP ]] || return 0
    tmp=$KTMP
    t=$SECONDS
    # The tree is built in $tmp but appears inside the root at its final path $KTREE
    # (a private tmpfs + bind in the build namespace), so nothing in it refers to $tmp.
    local -a R=("$ROOTFS" --proc --stage "$tmp" "$KTREE" --)
    log "kernel: extracting linux-source-$LINUX_SERIES $LINUX_PKG (step 1/4)"
    root_run "${R[@]}" sh -euc "$(kernel_recipe extract "$KTREE")"
    printf '%s\n' "$FRAGMENT" >"$tmp/.belfry.config"
    log "kernel: tinyconfig + belfry.config + olddefconfig (step 2/4, $((SECONDS - t)) s elapsed)"
    if ! root_run "${R[@]}" sh -euc "$(kernel_recipe config "$KTREE")" >"$tmp/.belfry-config.log" 2>&1; then
        tail -n 30 "$tmp/.belfry-config.log" >&2; die "kernel: configuration failed"
    fi
    grep -E 'Rust is available|rustc|bindgen' "$tmp/.belfry-config.log" | head -n 3 | sed 's/^/[provision]   /' >&2 || true
    verify_config "$tmp/.belfry.config" "$tmp/.config" || die "kernel: fragment options dropped (see above)"
    log "kernel: all $(grep -cE '^(CONFIG_|# CONFIG_.* is not set)' "$tmp/.belfry.config") fragment options verified in .config"
    stats=$CACHE/kernels/.objects-last-build
    # The objects of the last build here, else those of a build of this configuration (1,368
    # on 2026-11-28), so a first build's progress counts against a real total.
    expected=$(cat "$stats" 2>/dev/null || echo "${BELFRY_KERNEL_OBJECTS:-1368}")
    t3=$SECONDS
    log "kernel: building ${KBUILD_TARGETS[*]} with -j$(($(nproc) + 1)) (step 3/4, $((SECONDS - t)) s elapsed, ~8-12 min)"
    run_progress kernel building "step 3/4" 600 "$tmp/.belfry-build.log" \
        "find '$tmp' -name '*.o' -newer '$tmp/.config' | wc -l" "$expected" -- \
        "$SELF" __in_root "${R[@]}" sh -euc "$(kernel_recipe build "$KTREE")"
    log "kernel: verifying artefacts (step 4/4, $((SECONDS - t)) s elapsed)"
    local f missing=()
    for f in vmlinux arch/x86/boot/bzImage Module.symvers scripts/mod/modpost rust/libkernel.rmeta \
             rust/libcore.rmeta; do
        [[ -e $tmp/$f ]] || missing+=("$f")
    done
    ((${#missing[@]} == 0)) || die "kernel: build finished but missing: ${missing[*]}"
    find "$tmp" -name '*.o' -newer "$tmp/.config" | wc -l >"$stats"
    {
        echo "key=$key"
        echo "linux-source=$LINUX_PKG"
        echo "fragment-sha256=$(printf '%s' "$FRAGMENT" | sha256sum | cut -d' ' -f1)"
        grep -E '^(rustc|rust-src|bindgen|libclang|gcc|key)=' "$ROOT_DIR/manifest" | sed 's/^key=/root-key=/'
        echo "uname-r=$(cat "$tmp/include/config/kernel.release")"
        echo "build-seconds=$((SECONDS - t3))"
        echo "total-seconds=$((SECONDS - t))"
        echo "objects=$(cat "$stats")"
        echo "flavour=$FLAVOUR"
        echo "boot=vmlinux"
        echo "make-args=${DEBUG_MAKE_ARGS[*]}"
    } >"$tmp/.belfry-manifest"
    mv -T "$tmp" "$KTREE"
    lock_release
    log "kernel: ready in $((SECONDS - t)) s (build $((SECONDS - t3)) s): $KTREE"
}

# ---------------------------------------------------------------- distro kernel

# The `distro` flavour: Debian's packaged image (linux-binary-$LINUX_DISTRO, built with
# CONFIG_RUST=y by the root's rustc 1.85.1 and gcc 14) is booted as it is; out of the
# linux-source tree configured with the image's own config only what an out-of-tree Rust
# module needs is built (`make modules_prepare`: scripts, objtool, rust/ core, kernel,
# bindings... metadata), with the compiler the image was built with. Module.symvers comes
# from the image's headers package. The image lacks DEBUG_ATOMIC_SLEEP, PANIC_ON_OOPS (the
# launcher boots it with oops=panic) and KUNIT; the `debug` flavour has them.
DISTRO_CC=x86_64-linux-gnu-gcc-14
DISTRO_PKGS=(linux-binary linux-base linux-headers)
# What modules_prepare never reads, anchored at the tree's top (rust/helpers/net/*.c is
# read): Kconfig, Makefiles and headers are kept everywhere. About half the tree's files,
# extracted for nothing on a busy disk. (Checked against the dependencies kbuild recorded
# in the .cmd files of a full tree's modules_prepare.)
DISTRO_SKIP=('drivers/*.c' 'sound/*.c' 'fs/*.c' 'net/*.c' 'Documentation/*.rst' 'Documentation/*.yaml'
             'Documentation/*.txt' 'tools/testing/*' 'samples/*.c')

distro_recipe() {
    # Steps run inside the root; $K is the tree's path there (== its final host path).
    local step=$1 K=$2 p
    local -a make=("${KMAKE[@]}" CC=$DISTRO_CC KERNELRELEASE=$LINUX_DISTRO)
    case $step in
        fetch) echo "mkdir -p $K/.debs && cd $K/.debs && apt-get download -q$(for p in "${DISTRO_PKGS[@]}"; do printf ' %s' "$p-$LINUX_DISTRO=$LINUX_PKG"; done)" ;;
        extract) echo "tar -I 'xz -T0' -xf /usr/src/linux-source-$LINUX_SERIES.tar.xz --strip-components=1 -C $K --anchored$(
                           for p in "${DISTRO_SKIP[@]}"; do printf " --exclude='linux-source-%s/%s'" "$LINUX_SERIES" "$p"; done) &&
                       for d in $K/.debs/*.deb; do dpkg-deb -x \$d $K/.pkg; done" ;;
        config) echo "cd $K && cp .pkg/usr/src/linux-headers-$LINUX_DISTRO/.config .config && ${make[*]} olddefconfig" ;;
        build) echo "cd $K && ${make[*]} -j$(($(nproc) + 1)) modules_prepare &&
                     cp .pkg/usr/src/linux-headers-$LINUX_DISTRO/Module.symvers Module.symvers &&
                     cp .pkg/usr/lib/modules/$LINUX_DISTRO/vmlinuz vmlinuz && echo $LINUX_DISTRO >include/config/kernel.release" ;;
    esac
}

distro_key() {
    local m=$ROOT_DIR/manifest t
    {
        echo "distro=$LINUX_DISTRO package=$LINUX_PKG"
        echo "linux-source=$(manifest_get "$m" linux-source)"
        for t in rustc rust-src bindgen libclang gcc pahole; do echo "$t=$(manifest_get "$m" "$t")"; done
        declare -f distro_recipe
        echo "${KMAKE[*]} $DISTRO_CC ${DISTRO_PKGS[*]} ${DISTRO_SKIP[*]}"
    } | sha
}

# The image's build config (the headers package's .config) must survive olddefconfig with
# the root's tools: a changed option would build metadata for another kernel. Allowed: the
# tool versions Kconfig records, what the signing tool supports and the signing key's path
# (modules_prepare signs nothing).
verify_distro_config() {
    local orig=$1 cfg=$2 diff
    diff=$(diff <(grep -E '^CONFIG_' "$orig" | sort) <(grep -E '^CONFIG_' "$cfg" | sort) |
        grep -E '^[<>]' | grep -vE 'CONFIG_(CC|AS|LD|RUSTC|BINDGEN|PAHOLE|GCC|CLANG|LLD)_[A-Z_]*VERSION|CONFIG_CC_VERSION_TEXT|CONFIG_OPENSSL_SUPPORTS_|CONFIG_MODULE_SIG_KEY=' || true)
    if [[ -n $diff ]]; then
        log "kernel: the image's config changed under olddefconfig (the root's tools differ from the image's):"
        printf '%s\n' "$diff" | head -n 40 | sed 's/^/[provision]   /' >&2
        return 1
    fi
    grep -qx 'CONFIG_RUST=y' "$cfg" || { log "kernel: CONFIG_RUST is not set in the image's config"; return 1; }
}

ensure_kernel_distro() {
    local key name tmp t t3 f
    ensure_root
    key=$(distro_key)
    name=distro-$LINUX_DISTRO-$key
    kernel_build_begin "$name" "$key"
    [[ -n $KTMP ]] || return 0
    tmp=$KTMP
    t=$SECONDS
    local -a R=("$ROOTFS" --proc --stage "$tmp" "$KTREE" --)
    log "kernel: downloading ${DISTRO_PKGS[*]} $LINUX_DISTRO $LINUX_PKG (distro, step 1/5)"
    root_run "${R[@]}" sh -euc "$(distro_recipe fetch "$KTREE")" >"$tmp/.belfry-fetch.log" 2>&1 ||
        { tail -n 20 "$tmp/.belfry-fetch.log" >&2; die "kernel: downloading the image packages failed (superseded? see ../kernel/linux-version)"; }
    log "kernel: extracting linux-source-$LINUX_SERIES and the packages (distro, step 2/5, $((SECONDS - t)) s elapsed)"
    root_run "${R[@]}" sh -euc "$(distro_recipe extract "$KTREE")"
    log "kernel: the image's config + olddefconfig (distro, step 3/5, $((SECONDS - t)) s elapsed)"
    if ! root_run "${R[@]}" sh -euc "$(distro_recipe config "$KTREE")" >"$tmp/.belfry-config.log" 2>&1; then
        tail -n 30 "$tmp/.belfry-config.log" >&2; die "kernel: configuration failed"
    fi
    verify_distro_config "$tmp/.pkg/usr/src/linux-headers-$LINUX_DISTRO/.config" "$tmp/.config" || die "kernel: the image's config did not survive (see above)"
    t3=$SECONDS
    log "kernel: building modules_prepare (scripts, rust/ metadata) with -j$(($(nproc) + 1)) (distro, step 4/5, $((SECONDS - t)) s elapsed, ~3 min)"
    run_progress kernel "building rust/ metadata" "step 4/5" 180 "$tmp/.belfry-build.log" '' 0 -- \
        "$SELF" __in_root "${R[@]}" sh -euc "$(distro_recipe build "$KTREE")"
    log "kernel: verifying artefacts (distro, step 5/5, $((SECONDS - t)) s elapsed)"
    local missing=()
    for f in vmlinuz Module.symvers scripts/mod/modpost rust/libkernel.rmeta rust/libcore.rmeta; do
        [[ -e $tmp/$f ]] || missing+=("$f")
    done
    ((${#missing[@]} == 0)) || die "kernel: build finished but missing: ${missing[*]}"
    cmp -s "$tmp/include/generated/utsrelease.h" "$tmp/.pkg/usr/src/linux-headers-$LINUX_DISTRO/include/generated/utsrelease.h" ||
        die "kernel: include/generated/utsrelease.h differs from the headers package's (vermagic would not match)"
    rm -rf "$tmp/.debs"
    {
        echo "key=$key"
        echo "flavour=distro"
        echo "boot=vmlinuz"
        echo "append=oops=panic"
        echo "make-args=CC=$DISTRO_CC"
        echo "linux-source=$LINUX_PKG"
        echo "image=linux-binary-$LINUX_DISTRO=$LINUX_PKG"
        grep -E '^(rustc|rust-src|bindgen|libclang|gcc|pahole|key)=' "$ROOT_DIR/manifest" | sed 's/^key=/root-key=/'
        echo "uname-r=$LINUX_DISTRO"
        echo "build-seconds=$((SECONDS - t3))"
        echo "total-seconds=$((SECONDS - t))"
    } >"$tmp/.belfry-manifest"
    mv -T "$tmp" "$KTREE"
    lock_release
    log "kernel: ready in $((SECONDS - t)) s (build $((SECONDS - t3)) s): $KTREE"
}

# ---------------------------------------------------------------- kmod

cmd_kmod() {
    (($# >= 1)) || die "usage: provision.sh kmod SRC_DIR [make args...]"
    local src repo owner t
    src=$(readlink -f "$1"); shift
    [[ -d $src ]] || die "kmod: $src is not a directory"
    [[ -f $src/Makefile || -f $src/Kbuild ]] || die "kmod: $src has no Makefile or Kbuild"
    ensure_kernel
    repo=${BELFRY_REPO_ROOT:-$(git -c safe.directory='*' -C "$src" rev-parse --show-toplevel 2>/dev/null || echo "$src")}
    repo=$(readlink -f "$repo")
    [[ $src == "$repo" || $src == "$repo"/* ]] || die "kmod: $src is not inside $repo"
    owner=$(stat -c %u:%g "$src")
    local -a as=()
    [[ $owner != 0:0 ]] && ((EUID == 0)) && as=(--as "$owner")
    # Each kernel flavour, and each set of make arguments (CLIPPY=1), builds into a directory of
    # its own under the repository's target/ (kbuild's MO=), so that a run on one flavour after
    # a run on another rebuilds nothing (one directory beside the sources took ~16 s a switch).
    local out=$repo/target/kmod/$FLAVOUR d
    (($#)) && out+=-$(printf '%s\n' "$@" | md5sum | cut -c1-8)
    for d in "$repo/target" "$repo/target/kmod" "$out"; do
        if [[ ! -d $d ]]; then
            mkdir -p "$d"
            if ((${#as[@]})); then chown "$owner" "$d"; fi
        fi
    done
    # One build of an output directory at a time: two builds in one directory fail on each
    # other's files (fixdep: error opening file). (Opened for reading: flock needs no write
    # access, so a lock file root created serves every user.)
    local build_lock lock_file=$out/.kmod-build.lock
    [[ -e $lock_file ]] || : >"$lock_file"
    exec {build_lock}<"$lock_file"
    if ! flock -n "$build_lock"; then
        log "kmod: another build into $out is running, waiting"
        flock "$build_lock"
    fi
    t=$SECONDS
    log "kmod: building $src into $out against $KTREE ($FLAVOUR; repo $repo bound at the same path)${*:+ with $*}"
    local -a flavour_args=()
    read -ra flavour_args <<<"$(manifest_get "$KTREE/.belfry-manifest" make-args)"
    local marker
    marker=$(mktemp); CLEANUP+=("$marker")
    local -a kmake=(root_run "$ROOTFS" --proc --bind "$repo" --bind "$CACHE/kernels" "${as[@]}" --cwd "$src" --
                    "${KMAKE[@]}" "${flavour_args[@]}" -C "$KTREE" M="$src")
    # kbuild refuses an output directory while the sources hold a build of their own (one made
    # beside them, by hand or by an older checkout): it is cleaned away once.
    if [[ -f $src/modules.order ]]; then
        log "kmod: removing the build beside the sources in $src (builds go to target/kmod/)"
        "${kmake[@]}" clean >&2 || die "kmod: clean failed"
    fi
    "${kmake[@]}" MO="$out" "$@" modules >&2 || die "kmod: build failed"
    local -a kos=()
    mapfile -t kos < <(find "$out" -maxdepth 1 -name '*.ko' -newer "$marker" | sort)
    ((${#kos[@]})) || mapfile -t kos < <(find "$out" -maxdepth 1 -name '*.ko' | sort)
    ((${#kos[@]})) || die "kmod: no .ko in $out"
    exec {build_lock}>&-
    log "kmod: done in $((SECONDS - t)) s"
    echo "${kos[*]}"
}

# cc OUT SRC.c [GCC_ARGS...]: compiles a static guest program with the root's gcc (the
# repository bound at the same path, so every path inside it works unchanged): the C API's
# demo program linked against libbelfry_umd_c.a. The program keeps its symbols but no debug
# information (the Rust standard library's, from the static library, made 7 of its 7.5 MB,
# which every boot's initramfs unpacks).
cmd_cc() {
    (($# >= 2)) || die "usage: provision.sh cc OUT SRC.c [gcc args...]"
    local out src repo owner t
    out=$(readlink -m "$1") src=$(readlink -f "$2"); shift 2
    [[ -f $src ]] || die "cc: $src does not exist"
    ensure_root
    repo=${BELFRY_REPO_ROOT:-$(git -c safe.directory='*' -C "$(dirname "$src")" rev-parse --show-toplevel 2>/dev/null || dirname "$src")}
    repo=$(readlink -f "$repo")
    [[ $src == "$repo"/* && $out == "$repo"/* ]] || die "cc: $src and $out must be inside $repo"
    mkdir -p "$(dirname "$out")"
    owner=$(stat -c %u:%g "$(dirname "$out")")
    local -a as=()
    [[ $owner != 0:0 ]] && ((EUID == 0)) && as=(--as "$owner")
    t=$SECONDS
    # Linked aside and renamed into place: runs side by side (ci/test's two guest lanes, the
    # launcher's guest tests) compile the same program, and one must never pack another's half.
    local partial=$out.partial.$$
    root_run "$ROOTFS" --bind "$repo" "${as[@]}" --cwd "$(dirname "$src")" -- \
        gcc -std=gnu11 -O2 -Wall -Wextra -Werror -static -Wl,--strip-debug -o "$partial" "$src" "$@" >&2 \
        || { rm -f "$partial"; die "cc: $src failed to build"; }
    mv -f "$partial" "$out"
    log "cc: $out in $((SECONDS - t)) s"
    echo "$out"
}

# ---------------------------------------------------------------- VFIO selftests

# The distro image's modules that bind a PCI device to vfio-pci (type1 IOMMU backend), in
# load order; the image has IOMMUFD off, so no iommufd module exists for it.
VFIO_MODULES=(virt/lib/irqbypass drivers/vfio/vfio drivers/vfio/vfio_iommu_type1
              drivers/vfio/pci/vfio-pci-core drivers/vfio/pci/vfio-pci)

# The image's linux-modules package, downloaded once into the cache by the root's apt (which
# checks it against the archive's signatures); sets VFIO_DEB. Part of `all`: an ordinary
# user cannot write the root-provisioned cache.
VFIO_DEB=''
ensure_vfio_package() {
    local pkg=linux-modules-$LINUX_DISTRO dir
    dir=$CACHE/packages/$pkg-$LINUX_PKG
    # No directory yet is no package yet (find's failure would end the script under pipefail).
    VFIO_DEB=''
    [[ -d $dir ]] && VFIO_DEB=$(find "$dir" -maxdepth 1 -name "${pkg}_*.deb" | head -n1)
    [[ -n $VFIO_DEB ]] && return 0
    ensure_root
    mkdir -p "$dir" 2>/dev/null && [[ -w $dir ]] || needs_root "the distro image's modules package ($pkg, for the VFIO selftests)"
    lock_take packages
    log "vfio-modules: downloading $pkg=$LINUX_PKG (~23 MB)"
    root_run "$ROOTFS" --bind "$dir" --cwd "$dir" -- apt-get download -q "$pkg=$LINUX_PKG" >&2 \
        || die "vfio-modules: downloading $pkg=$LINUX_PKG failed"
    lock_release
    VFIO_DEB=$(find "$dir" -maxdepth 1 -name "${pkg}_*.deb" | head -n1)
    [[ -n $VFIO_DEB ]] || die "vfio-modules: no $pkg package in $dir"
}

# vfio-modules OUT_DIR: the VFIO modules of the image's linux-modules package, decompressed
# into OUT_DIR. Only the distro flavour: the debug kernel has no VFIO.
cmd_vfio_modules() {
    (($# == 1)) || die "usage: provision.sh vfio-modules OUT_DIR"
    local out m deb
    out=$(readlink -m "$1")
    ensure_vfio_package
    deb=$VFIO_DEB
    mkdir -p "$out"
    local tmp; tmp=$(mktemp -d); CLEANUP+=("$tmp")
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" --wildcards './usr/lib/modules/*/kernel/drivers/vfio/*' './usr/lib/modules/*/kernel/virt/lib/*'
    local -a kos=()
    for m in "${VFIO_MODULES[@]}"; do
        local src=$tmp/usr/lib/modules/$LINUX_DISTRO/kernel/$m.ko.xz
        [[ -f $src ]] || die "vfio-modules: $deb has no ${m##*/}"
        xz -dc "$src" >"$out/${m##*/}.ko"
        kos+=("$out/${m##*/}.ko")
    done
    log "vfio-modules: ${#kos[@]} modules in $out"
    echo "${kos[*]}"
}

# vfio-selftests OUT_DIR [PLUGIN_DIR]: Linux's tools/testing/selftests/vfio from the root's
# linux-source (extracted once into OUT_DIR/src), built static with the root's gcc into
# OUT_DIR. PLUGIN_DIR (a driver plugin: PLUGIN_DIR/NAME.c and its registers' header, whose
# ops are NAME_ops) is added to libvfio's drivers. libuuid is not in the root: a header gives
# the selftests uuid_parse.
cmd_vfio_selftests() {
    (($# >= 1 && $# <= 2)) || die "usage: provision.sh vfio-selftests OUT_DIR [PLUGIN_DIR]"
    local out plugin='' tree src name t
    out=$(readlink -m "$1")
    (($# == 2)) && plugin=$(readlink -f "$2")
    ensure_root
    t=$SECONDS
    tree=$out/src/linux-source-$LINUX_SERIES
    src=$tree/tools/testing/selftests/vfio
    if [[ ! -f $out/src/.extracted ]]; then
        rm -rf "$out/src"; mkdir -p "$out/src"
        # tools/ and scripts/, the uapi headers, and what the selftests' symlinks point at.
        log "vfio-selftests: extracting tools/ and scripts/ of linux-source-$LINUX_SERIES"
        tar -I 'xz -T0' -xf "$ROOTFS/usr/src/linux-source-$LINUX_SERIES.tar.xz" -C "$out/src" \
            "linux-source-$LINUX_SERIES/tools" "linux-source-$LINUX_SERIES/scripts" \
            "linux-source-$LINUX_SERIES/include/uapi" "linux-source-$LINUX_SERIES/arch/x86/include/uapi" \
            "linux-source-$LINUX_SERIES/include/linux/pci_ids.h" \
            "linux-source-$LINUX_SERIES/drivers/dma/idxd/registers.h" "linux-source-$LINUX_SERIES/drivers/dma/ioat/hw.h" \
            "linux-source-$LINUX_SERIES/drivers/dma/ioat/registers.h" \
            "linux-source-$LINUX_SERIES/drivers/net/ethernet/intel/igb/e1000_regs.h" \
            "linux-source-$LINUX_SERIES/drivers/net/ethernet/intel/igb/e1000_82575.h" \
            "linux-source-$LINUX_SERIES/drivers/net/ethernet/intel/igb/e1000_defines.h" \
            || die "vfio-selftests: extracting the source failed"
        touch "$out/src/.extracted"
    fi
    mkdir -p "$out/shim/uuid"
    cat >"$out/shim/uuid/uuid.h" <<'SHIM'
/* uuid_parse for a root without libuuid: the VFIO selftests parse an SR-IOV VF token with it. */
#ifndef BELFRY_SELFTESTS_UUID_H
#define BELFRY_SELFTESTS_UUID_H
typedef unsigned char uuid_t[16];
static inline int uuid_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}
static inline int uuid_parse(const char *in, uuid_t uu)
{
	int i, n = 0;

	for (i = 0; i < 36; i++) {
		int hi, lo;

		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (in[i] != '-')
				return -1;
			continue;
		}
		hi = uuid_hex_digit(in[i]);
		lo = uuid_hex_digit(in[i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		uu[n++] = (unsigned char)(hi << 4 | lo);
		i++;
	}
	return in[36] == '\0' ? 0 : -1;
}
#endif
SHIM
    local -a extra=()
    if [[ -n $plugin ]]; then
        name=$(basename "$plugin")
        rm -rf "$src/lib/drivers/$name"
        cp -r "$plugin" "$src/lib/drivers/$name"
        # Registered beside the kernel's own plugins (their list ends with igb).
        grep -q "${name}_ops" "$src/lib/vfio_pci_driver.c" || sed -i \
            -e "s/^extern struct vfio_pci_driver_ops igb_ops;/&\nextern struct vfio_pci_driver_ops ${name}_ops;/" \
            -e "s/^\t&igb_ops,/&\n\t\&${name}_ops,/" "$src/lib/vfio_pci_driver.c"
        # Beside igb's source too: the list must be whole before LIBVFIO_O is computed from it.
        sed -i -e "\|^LIBVFIO_C += drivers/$name/|d" \
            -e "s|^LIBVFIO_C += drivers/igb/igb.c$|&\nLIBVFIO_C += drivers/$name/$name.c|" "$src/lib/libvfio.mk"
        grep -q "^LIBVFIO_C += drivers/$name/$name.c" "$src/lib/libvfio.mk" || die "vfio-selftests: lib/libvfio.mk's driver list not found"
    fi
    # The distro image (the only kernel with VFIO) has IOMMUFD off: the selftests' default
    # IOMMU mode, iommufd, cannot open /dev/iommu there, so the tests that take the default
    # use VFIO's type1v2 container instead (those that run every mode still run iommufd's).
    set_flavour distro; ensure_kernel
    if ! grep -q '^CONFIG_IOMMUFD=' "$KTREE/.config"; then
        sed -i 's/^const char \*default_iommu_mode = MODE_IOMMUFD;/const char *default_iommu_mode = MODE_VFIO_TYPE1V2_IOMMU;/' "$src/lib/iommu.c"
        grep -q 'default_iommu_mode = MODE_VFIO_TYPE1V2_IOMMU' "$src/lib/iommu.c" || die "vfio-selftests: lib/iommu.c's default mode not found"
        log "vfio-selftests: the distro kernel has no IOMMUFD: default IOMMU mode vfio_type1v2_iommu"
    fi
    log "vfio-selftests: building $src"
    root_run "$ROOTFS" --bind "$out" --cwd "$src" -- \
        make -j"$(nproc)" OUTPUT="$out" LDLIBS= \
            "KHDR_INCLUDES=-isystem $tree/include/uapi -isystem $tree/arch/x86/include/uapi" \
            "EXTRA_CFLAGS=-static -I$out/shim" >&2 \
        || die "vfio-selftests: the build failed"
    log "vfio-selftests: $out in $((SECONDS - t)) s"
    echo "$out"
}

# ---------------------------------------------------------------- qemu

qemu_ok() {   # qemu_ok BINARY -> 0 if version >= 10.1 and it has vfio-user-pci
    local v maj min
    v=$("$1" --version 2>/dev/null | sed -n 's/^QEMU emulator version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
    read -r maj min <<<"$v"
    [[ -n ${maj:-} ]] || return 1
    ((maj > 10 || (maj == 10 && min >= 1))) || return 1
    "$1" -device help 2>/dev/null | grep -q '"vfio-user-pci"'
}

QEMU_MODE='' QEMU_WHERE=''
locate_qemu() {
    local q
    if [[ -n ${BELFRY_QEMU:-} ]]; then
        [[ -x $BELFRY_QEMU ]] || die "BELFRY_QEMU=$BELFRY_QEMU is not executable"
        QEMU_MODE=host QEMU_WHERE=$BELFRY_QEMU; return
    fi
    if q=$(command -v qemu-system-x86_64) && qemu_ok "$q"; then
        QEMU_MODE=host QEMU_WHERE=$q; return
    fi
    ensure_root
    QEMU_MODE=root QEMU_WHERE=$ROOTFS
}

cmd_run_qemu() {
    local -a binds=()
    while (($#)); do
        case $1 in
            --bind) (($# >= 2)) || die "run-qemu: --bind needs a directory"
                    [[ -d $2 ]] || die "run-qemu: --bind $2: not a directory"
                    binds+=(--bind "$(realpath -s -- "$2")"); shift 2 ;;
            --) shift; break ;;
            *) die "usage: provision.sh run-qemu [--bind DIR]... -- QEMU_ARGS..." ;;
        esac
    done
    locate_qemu
    lock_release
    if [[ $QEMU_MODE == host ]]; then
        exec "$QEMU_WHERE" "$@"
    fi
    # TCG needs no device nodes (the root has its own /dev/null etc.); KVM needs /dev/kvm.
    case " $* " in *kvm*) binds+=(--dev) ;; esac
    # The cwd is kept inside the root only if it lies under a --bind DIR: use absolute paths.
    in_root "$QEMU_WHERE" "${binds[@]}" --cwd "$PWD" -- qemu-system-x86_64 "$@"
}

# ---------------------------------------------------------------- initramfs

cmd_initramfs() {
    (($# >= 1)) || die "usage: provision.sh initramfs OUT.cpio [--add HOSTPATH:GUESTPATH]..."
    local out=$1 spec host guest list gen bb p d
    shift
    out=$(readlink -f "$out")
    ensure_root
    gen=$ROOTFS/usr/local/bin/gen_init_cpio
    bb=$ROOTFS/usr/bin/busybox
    [[ -x $gen && -x $bb ]] || die "initramfs: $gen or $bb missing"
    list=$(mktemp); CLEANUP+=("$list" "$out.tmp.$$")
    declare -A dirs=()
    emit_dir() {   # emit_dir /a/b/c: emit missing dirs /a /a/b /a/b/c
        local path='' comp
        local -a comps
        IFS=/ read -ra comps <<<"${1#/}"
        for comp in "${comps[@]}"; do
            [[ -n $comp ]] || continue
            path+=/$comp
            [[ -n ${dirs[$path]:-} ]] && continue
            dirs[$path]=1
            echo "dir $path 0755 0 0"
        done
    }
    check_path() { [[ $1 != *[[:space:]]* ]] || die "initramfs: paths with whitespace are not supported: '$1'"; }
    {
        for d in /dev /proc /sys /tmp /root /etc /mnt /bin /sbin /usr/bin /usr/sbin /belfry; do emit_dir "$d"; done
        echo "nod /dev/console 0600 0 0 c 5 1"
        echo "nod /dev/null 0666 0 0 c 1 3"
        echo "file /bin/busybox $bb 0755 0 0"
        while IFS= read -r p; do
            [[ $p == bin/busybox ]] && continue
            [[ $p == */* ]] && emit_dir "/${p%/*}"
            echo "slink /$p /bin/busybox 0777 0 0"
        done < <("$bb" --list-full)
        echo "file /init $HERE/guest-init.sh 0755 0 0"
        for spec in "${ADDS[@]}"; do
            host=${spec%%:*} guest=${spec#*:}
            [[ $spec == *:* && -n $host && $guest == /* ]] || die "initramfs: --add wants HOSTPATH:/GUESTPATH, got '$spec'"
            check_path "$host"; check_path "$guest"
            [[ -e $host ]] || die "initramfs: $host does not exist"
            emit_dir "$(dirname "$guest")"
            if [[ -d $host ]]; then
                emit_dir "$guest"
                while IFS= read -r -d '' p; do
                    check_path "$p"
                    local g=$guest${p#"$host"}
                    if [[ -L $p ]]; then echo "slink $g $(readlink "$p") 0777 0 0"
                    elif [[ -d $p ]]; then emit_dir "$g"
                    elif [[ -f $p ]]; then echo "file $g $p $(stat -c %a "$p") 0 0"
                    fi
                done < <(find "$host" -mindepth 1 -print0 | sort -z)
            elif [[ -L $host ]]; then
                echo "slink $guest $(readlink "$host") 0777 0 0"
            else
                echo "file $guest $(readlink -f "$host") $(stat -c %a "$host") 0 0"
            fi
        done
    } >"$list"
    # Not compressed: the guest kernel unpacks the archive before /init can run, and on the
    # debug kernel under TCG inflating it (instrumented by KASAN) cost more of the boot than
    # copying the larger archive does.
    "$gen" -t 0 "$list" >"$out.tmp.$$"
    mv "$out.tmp.$$" "$out"
    log "initramfs: $out ($(stat -c %s "$out") bytes, $(grep -c '' "$list") entries)"
    echo "$out"
}

# ---------------------------------------------------------------- status

# What the cache holds and where QEMU would come from, as KEY=VALUE lines; builds and
# installs nothing (for `cargo belfry doctor`).
cmd_status() {
    local key q f state all=ready
    echo "cache=$CACHE"
    key=$(root_key)
    ROOT_DIR=$CACHE/roots/trixie-$key
    ROOTFS=$ROOT_DIR/rootfs
    if [[ -f $ROOT_DIR/manifest ]]; then
        echo "root=ready $ROOTFS"
        echo "root-qemu=$(manifest_get "$ROOT_DIR/manifest" qemu-version)"
        local -A trees=([distro]=$CACHE/kernels/distro-$LINUX_DISTRO-$(distro_key))
        for f in debug kcsan; do
            FRAGMENT=$(flavour_fragment $f)
            trees[$f]=$CACHE/kernels/$(source_tree_name $f "$(kernel_key)")
        done
        for f in distro debug kcsan; do
            # `all` is what both README commands need: the kcsan flavour is not part of it.
            if [[ -f ${trees[$f]}/.belfry-manifest ]]; then state=ready; else state=missing; [[ $f == kcsan ]] || all=missing; fi
            echo "kernel-$f=$state ${trees[$f]}"
            [[ $f == "$FLAVOUR" ]] && echo "kernel=$state ${trees[$f]}"
        done
        f=$CACHE/packages/linux-modules-$LINUX_DISTRO-$LINUX_PKG
        if compgen -G "$f/*.deb" >/dev/null; then state=ready; else state=missing all=missing; fi
        echo "vfio-package=$state $f"
    else
        all=missing
        echo "root=missing $ROOTFS"
        echo "kernel=missing (built after the root)"
        echo "kernel-distro=missing (built after the root)"
        echo "kernel-debug=missing (built after the root)"
        echo "kernel-kcsan=missing (built after the root)"
    fi
    echo "flavour=$FLAVOUR"
    echo "all=$all"
    echo "root-command=$(root_command)"
    echo "root-command-estimate=$ROOT_COMMAND_ESTIMATE"
    if [[ -n ${BELFRY_QEMU:-} ]]; then
        echo "host-qemu=BELFRY_QEMU $BELFRY_QEMU"
    elif q=$(command -v qemu-system-x86_64); then
        if qemu_ok "$q"; then echo "host-qemu=usable $q"; else echo "host-qemu=unusable $q ($("$q" --version 2>/dev/null | head -n1))"; fi
    else
        echo "host-qemu=none"
    fi
    for q in mmdebstrap debootstrap; do
        command -v "$q" >/dev/null && echo "bootstrap=$q"
    done
    return 0
}

# Everything both README commands need: the root, then the distro and debug kernels (each
# skipped when cached). One line: the three paths.
cmd_all() {
    local distro
    ensure_root
    set_flavour distro; ensure_kernel; distro=$KTREE
    ensure_vfio_package
    set_flavour debug; ensure_kernel
    log "all: the root, both guest kernels and the distro image's modules package are ready in $CACHE"
    echo "$ROOTFS $distro $KTREE"
}

# ---------------------------------------------------------------- main

usage() {
    sed -n '2,22p' "$SELF" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

ADDS=()
main() {
    (($#)) || usage
    local cmd=$1; shift
    read_linux_version
    set_flavour "$FLAVOUR"
    case $cmd in
        root)
            ensure_root; echo "$ROOTFS" ;;
        all)
            (($# == 0)) || usage
            cmd_all ;;
        kernel)
            (($# <= 1)) || usage
            (($#)) && set_flavour "$1"
            ensure_kernel; echo "$KTREE" ;;
        kmod)
            cmd_kmod "$@" ;;
        qemu)
            locate_qemu; echo "$QEMU_MODE $QEMU_WHERE" ;;
        run-qemu)
            cmd_run_qemu "$@" ;;
        cc)
            cmd_cc "$@" ;;
        vfio-modules)
            [[ $FLAVOUR == distro ]] || die "vfio-modules: the $FLAVOUR kernel has no VFIO (only the distro image's modules exist)"
            cmd_vfio_modules "$@" ;;
        vfio-selftests)
            cmd_vfio_selftests "$@" ;;
        status)
            cmd_status ;;
        initramfs)
            (($# >= 1)) || usage
            local out=$1; shift
            while (($#)); do
                [[ $1 == --add && $# -ge 2 ]] || usage
                ADDS+=("$2"); shift 2
            done
            cmd_initramfs "$out" ;;
        __ns)
            trap - EXIT; ns_main "$@" ;;
        __in_root)
            trap - EXIT; in_root "$@" ;;
        __recipe)
            trap - EXIT
            case $1 in
                mmdebstrap) root_recipe_mmdebstrap "$2" "$3" ;;
                debootstrap) root_recipe_debootstrap "$2" "$3" ;;
            esac ;;
        -h|--help|help) usage ;;
        *) die "unknown subcommand '$cmd' (root, kernel, all, kmod, qemu, run-qemu, initramfs, cc, vfio-modules, vfio-selftests, status)" ;;
    esac
}

# On one line: bash has parsed "exit" before main runs, so editing this file while it
# runs (or a long build) cannot make bash read garbage after main returns.
main "$@"; exit
