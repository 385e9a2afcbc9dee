//! The QEMU command line (q35, shared memfd guest RAM, a PVH vmlinux or a bzImage, two serial
//! ports, one `vfio-user-pci` per device, optionally a virtual IOMMU in front of them) and the
//! choice of accelerator.
//!
//! `/dev/kvm` can be kvm-pvm (the host module `kvm_pvm`), on which an unmodified guest dies with
//! "KVM internal error"; `auto` therefore picks KVM only when `/dev/kvm` can be opened and no
//! `kvm_pvm` module is loaded.

use std::ffi::OsString;
use std::fmt;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

/// The accelerator requested on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AccelChoice {
    /// KVM where it truly works, else TCG.
    Auto,
    /// QEMU's software emulation.
    Tcg,
    /// Hardware virtualisation.
    Kvm,
}

/// The accelerator used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// QEMU's software emulation (`-cpu max`).
    Tcg,
    /// KVM (`-cpu host`).
    Kvm,
}

impl fmt::Display for Accel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        })
    }
}

/// What the host offers, as far as the accelerator choice is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvmProbe {
    /// `/dev/kvm` can be opened read-write.
    pub dev_kvm_usable: bool,
    /// The `kvm_pvm` module is loaded (`/dev/kvm` is PVM, not hardware KVM).
    pub kvm_pvm: bool,
}

impl KvmProbe {
    /// Looks at this host.
    pub fn host() -> Self {
        let dev_kvm_usable = OpenOptions::new().read(true).write(true).open("/dev/kvm").is_ok();
        let in_proc_modules = std::fs::read_to_string("/proc/modules")
            .map(|m| m.lines().any(|l| l.starts_with("kvm_pvm ")))
            .unwrap_or(false);
        let kvm_pvm = in_proc_modules || Path::new("/sys/module/kvm_pvm").exists();
        Self { dev_kvm_usable, kvm_pvm }
    }
}

/// Chooses the accelerator; returns it with the reason, for the user.
pub fn choose_accel(choice: AccelChoice, probe: KvmProbe) -> (Accel, &'static str) {
    match choice {
        AccelChoice::Tcg => (Accel::Tcg, "requested"),
        AccelChoice::Kvm => (Accel::Kvm, "requested"),
        AccelChoice::Auto if !probe.dev_kvm_usable => (Accel::Tcg, "/dev/kvm is not usable"),
        AccelChoice::Auto if probe.kvm_pvm => (Accel::Tcg, "/dev/kvm is kvm-pvm, where unmodified guests fail"),
        AccelChoice::Auto => (Accel::Kvm, "/dev/kvm is usable"),
    }
}

/// A virtual IOMMU in the guest (`--viommu`): the devices' DMA then goes through the guest's
/// IOVA mappings, which QEMU's vfio-user client carries to each device as `DMA_MAP` and
/// `DMA_UNMAP` per IOVA range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Viommu {
    /// QEMU's `intel-iommu` (VT-d) with caching mode, which QEMU's VFIO code needs to see the
    /// guest's maps as well as its unmaps; interrupt remapping off (under KVM it would need a
    /// split irqchip, and the devices' MSI-X needs none).
    Intel,
    /// QEMU's `virtio-iommu-pci` (the guest needs its `virtio_iommu` driver).
    Virtio,
}

impl Viommu {
    /// The `-device` value, placed before the devices it translates for.
    pub fn device(self) -> &'static str {
        match self {
            Viommu::Intel => "intel-iommu,caching-mode=on,intremap=off",
            Viommu::Virtio => "virtio-iommu-pci",
        }
    }

    /// What the guest kernel's command line needs for it.
    pub fn boot_args(self) -> Option<&'static str> {
        match self {
            Viommu::Intel => Some("intel_iommu=on"),
            Viommu::Virtio => None,
        }
    }
}

/// Where the guest console goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Console {
    /// QEMU's standard output (a pipe the launcher streams).
    Pipe,
    /// The terminal, interactive; QEMU also copies it to `log`. Ctrl-C ends QEMU.
    Terminal {
        /// The console log file.
        log: PathBuf,
    },
}

/// Everything the QEMU command line depends on.
#[derive(Clone, Debug)]
pub struct QemuConfig {
    /// The accelerator.
    pub accel: Accel,
    /// Guest RAM, as QEMU spells sizes ("1G").
    pub memory: String,
    /// Virtual CPUs (at most 2: the device threads share the host's cores).
    pub smp: u32,
    /// The kernel image: `vmlinux` (PVH, the debug flavour) or a bzImage (the distro flavour).
    pub kernel: PathBuf,
    /// The initramfs.
    pub initrd: PathBuf,
    /// Extra kernel command line.
    pub append_extra: Option<String>,
    /// The console (first serial port).
    pub console: Console,
    /// The file receiving the second serial port (guest `/dev/ttyS1`).
    pub results: PathBuf,
    /// One vfio-user socket per device.
    pub sockets: Vec<PathBuf>,
    /// Also attach QEMU's `edu` device.
    pub edu: bool,
    /// A virtual IOMMU in front of the devices.
    pub viommu: Option<Viommu>,
    /// QEMU's monitor (QMP) on this unix socket, for the launcher's key presses that wake a
    /// sleeping guest (`wake.rs`).
    pub qmp: Option<PathBuf>,
}

/// The kernel command line. `no_timer_check`: under TCG on a loaded host the kernel's boot-time
/// check that the IO-APIC timer ticks can miss its window and panic ("IO-APIC + timer doesn't
/// work!"); virtual machines skip that check (the timer is QEMU's and known good).
/// `unknown_nmi_panic` with [`PANIC_INFO`]: the NMI the launcher injects into a guest that ran
/// out of time (`supervise.rs`) ends it with every CPU's backtrace, its blocked tasks and the
/// locks held on the console. Under TCG, [`TCG_TSC`].
pub fn kernel_append(accel: Accel, extra: Option<&str>) -> String {
    let mut append = format!("console=ttyS0 panic=-1 no_timer_check unknown_nmi_panic {PANIC_INFO}");
    if accel == Accel::Tcg {
        append.push(' ');
        append.push_str(TCG_TSC);
    }
    if let Some(extra) = extra.map(str::trim).filter(|e| !e.is_empty()) {
        append.push(' ');
        append.push_str(extra);
    }
    append
}

/// The guest's TSC needs no watchdog under TCG: every vCPU reads QEMU's one host-clock-derived
/// counter. Without it the 7.3 kernel's clocksource watchdog, before the kernel leaves the
/// jiffies clock (`clocksource: Switched to clocksource tsc-early`), can deadlock a boot
/// against `stop_machine`: CPU 0, in the watchdog's cross-CPU skew check with its interrupts
/// off, waits for CPU 1 to answer a function call, bounded by a timeout read from jiffies;
/// CPU 1, in `multi_cpu_stop` with its interrupts off, waits for CPU 0; no CPU takes the tick,
/// so jiffies never move (the backtraces of the boots that stopped after `smpboot: Total of 2
/// processors activated` and `hpet0: 3 comparators` on a loaded host). With the TSC reliable
/// the watchdog never checks it.
pub const TCG_TSC: &str = "tsc=reliable";

/// What a panicking guest prints beyond the panic's own backtrace (`locks` on a lockdep kernel).
pub const PANIC_INFO: &str = "panic_sys_info=all_bt,blocked_tasks,locks";

/// A JSON string literal (for QEMU's JSON `-device` syntax).
fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The `-device` value attaching one vfio-user device.
pub fn vfio_user_device(socket: &Path) -> String {
    format!(
        r#"{{"driver":"vfio-user-pci","socket":{{"type":"unix","path":{}}}}}"#,
        json_string(&socket.display().to_string())
    )
}

/// Escapes a value for QEMU's comma-separated option syntax (`,` is written `,,`).
fn qemu_opt(value: &Path) -> String {
    value.display().to_string().replace(',', ",,")
}

impl QemuConfig {
    /// The QEMU arguments (without the program).
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<String> = vec![
            "-M".into(),
            "q35,memory-backend=mem".into(),
            "-object".into(),
            format!("memory-backend-memfd,id=mem,size={},share=on", self.memory),
            "-m".into(),
            self.memory.clone(),
            "-accel".into(),
            self.accel.to_string(),
            "-cpu".into(),
            match self.accel {
                Accel::Tcg => "max".into(),
                Accel::Kvm => "host".into(),
            },
            "-smp".into(),
            self.smp.to_string(),
            "-nodefaults".into(),
            "-no-user-config".into(),
            "-display".into(),
            "none".into(),
            "-no-reboot".into(),
            "-net".into(),
            "none".into(),
            "-kernel".into(),
            self.kernel.display().to_string(),
            "-initrd".into(),
            self.initrd.display().to_string(),
            "-append".into(),
            kernel_append(self.accel, self.append_extra.as_deref()),
        ];
        match &self.console {
            Console::Pipe => args.extend(["-serial".into(), "stdio".into()]),
            Console::Terminal { log } => args.extend([
                "-chardev".into(),
                format!("stdio,id=console,signal=on,logfile={}", qemu_opt(log)),
                "-serial".into(),
                "chardev:console".into(),
            ]),
        }
        args.extend(["-serial".into(), format!("file:{}", self.results.display())]);
        if let Some(viommu) = self.viommu {
            args.extend(["-device".into(), viommu.device().into()]);
        }
        for socket in &self.sockets {
            args.extend(["-device".into(), vfio_user_device(socket)]);
        }
        if self.edu {
            args.extend(["-device".into(), "edu".into()]);
        }
        if let Some(qmp) = &self.qmp {
            args.extend(["-qmp".into(), format!("unix:{},server=on,wait=off", qemu_opt(qmp))]);
        }
        args.into_iter().map(OsString::from).collect()
    }
}

/// The directories QEMU must see when it runs inside the provisioning root.
pub fn bind_dirs(config: &QemuConfig, run_dir: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![run_dir.to_path_buf()];
    for path in [&config.kernel, &config.initrd, &config.results].into_iter().chain(config.qmp.as_ref()) {
        if let Some(parent) = path.parent() {
            if !parent.starts_with(run_dir) && !dirs.iter().any(|d| d == parent) {
                dirs.push(parent.to_path_buf());
            }
        }
    }
    for socket in &config.sockets {
        if let Some(parent) = socket.parent() {
            if !parent.starts_with(run_dir) && !dirs.iter().any(|d| d == parent) {
                dirs.push(parent.to_path_buf());
            }
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(console: Console) -> QemuConfig {
        QemuConfig {
            accel: Accel::Tcg,
            memory: "1G".into(),
            smp: 2,
            kernel: "/cache/linux/vmlinux".into(),
            initrd: "/runs/r1/initramfs.cpio".into(),
            append_extra: Some("rdinit=/no-such-init".into()),
            console,
            results: "/runs/r1/results.txt".into(),
            sockets: vec!["/runs/r1/sock/device0.sock".into(), "/runs/r1/sock/device1.sock".into()],
            edu: false,
            viommu: None,
            qmp: None,
        }
    }

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn command_line_has_the_required_machine_and_devices() {
        let args = strings(config(Console::Pipe).args());
        let joined = args.join(" ");
        for expected in [
            "-M q35,memory-backend=mem",
            "-object memory-backend-memfd,id=mem,size=1G,share=on -m 1G",
            "-accel tcg -cpu max -smp 2",
            "-nodefaults -no-user-config -display none -no-reboot -net none",
            "-kernel /cache/linux/vmlinux -initrd /runs/r1/initramfs.cpio",
            "-serial stdio -serial file:/runs/r1/results.txt",
        ] {
            assert!(joined.contains(expected), "missing '{expected}' in {joined}");
        }
        let append = args.iter().position(|a| a == "-append").unwrap();
        assert_eq!(args[append + 1], format!("{} rdinit=/no-such-init", kernel_append(Accel::Tcg, None)));
        let devices: Vec<&String> = args
            .iter()
            .zip(args.iter().skip(1))
            .filter(|(flag, _)| *flag == "-device")
            .map(|(_, value)| value)
            .collect();
        assert_eq!(
            devices,
            vec![
                r#"{"driver":"vfio-user-pci","socket":{"type":"unix","path":"/runs/r1/sock/device0.sock"}}"#,
                r#"{"driver":"vfio-user-pci","socket":{"type":"unix","path":"/runs/r1/sock/device1.sock"}}"#,
            ]
        );
    }

    #[test]
    fn a_viommu_comes_before_the_devices_it_translates_for() {
        let mut c = config(Console::Pipe);
        assert!(!strings(c.args()).join(" ").contains("iommu"), "none by default");
        for (viommu, device) in
            [(Viommu::Intel, "intel-iommu,caching-mode=on,intremap=off"), (Viommu::Virtio, "virtio-iommu-pci")]
        {
            c.viommu = Some(viommu);
            let args = strings(c.args());
            let devices: Vec<&String> =
                args.iter().zip(args.iter().skip(1)).filter(|(f, _)| *f == "-device").map(|(_, v)| v).collect();
            assert_eq!(devices.len(), 3);
            assert_eq!(
                devices[0], device,
                "the IOMMU first: QEMU attaches a device to the IOMMU present when it is created"
            );
            assert!(devices[1..].iter().all(|d| d.contains("vfio-user-pci")));
        }
        assert_eq!(Viommu::Intel.boot_args(), Some("intel_iommu=on"));
    }

    #[test]
    fn terminal_console_is_stdio_with_signals_and_a_log() {
        let args = strings(config(Console::Terminal { log: "/runs/a,b/console.log".into() }).args());
        let joined = args.join(" ");
        assert!(joined
            .contains("-chardev stdio,id=console,signal=on,logfile=/runs/a,,b/console.log -serial chardev:console"));
        assert!(!joined.contains("-serial stdio"));
    }

    #[test]
    fn a_qmp_socket_is_a_server_that_does_not_wait() {
        let mut c = config(Console::Pipe);
        assert!(!strings(c.args()).iter().any(|a| a == "-qmp"));
        c.qmp = Some("/runs/a,b/qmp.sock".into());
        assert!(strings(c.args()).join(" ").contains("-qmp unix:/runs/a,,b/qmp.sock,server=on,wait=off"));
    }

    #[test]
    fn kvm_uses_the_host_cpu() {
        let mut c = config(Console::Pipe);
        c.accel = Accel::Kvm;
        assert!(strings(c.args()).join(" ").contains("-accel kvm -cpu host"));
    }

    #[test]
    fn kernel_append_ignores_empty_extras() {
        assert!(kernel_append(Accel::Kvm, None).starts_with("console=ttyS0 panic=-1 no_timer_check unknown_nmi_panic "));
        assert_eq!(kernel_append(Accel::Tcg, Some("  ")), kernel_append(Accel::Tcg, None));
        assert!(kernel_append(Accel::Tcg, None).split(' ').any(|w| w == TCG_TSC));
        assert!(!kernel_append(Accel::Kvm, None).contains("tsc="));
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(
            vfio_user_device(Path::new("/a\"b\\c")),
            r#"{"driver":"vfio-user-pci","socket":{"type":"unix","path":"/a\"b\\c"}}"#
        );
    }

    #[test]
    fn auto_accel_avoids_kvm_pvm() {
        let pvm = KvmProbe { dev_kvm_usable: true, kvm_pvm: true };
        assert_eq!(choose_accel(AccelChoice::Auto, pvm).0, Accel::Tcg);
        let real = KvmProbe { dev_kvm_usable: true, kvm_pvm: false };
        assert_eq!(choose_accel(AccelChoice::Auto, real).0, Accel::Kvm);
        let none = KvmProbe { dev_kvm_usable: false, kvm_pvm: false };
        assert_eq!(choose_accel(AccelChoice::Auto, none).0, Accel::Tcg);
        assert_eq!(choose_accel(AccelChoice::Kvm, pvm).0, Accel::Kvm);
    }

    #[test]
    fn bind_dirs_cover_everything_outside_the_run_dir() {
        let c = config(Console::Pipe);
        assert_eq!(
            bind_dirs(&c, Path::new("/runs/r1")),
            vec![PathBuf::from("/runs/r1"), PathBuf::from("/cache/linux")]
        );
    }
}
