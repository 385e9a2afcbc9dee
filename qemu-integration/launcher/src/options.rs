//! The options every run takes (`--devices`, `--kernel`, `--timeout`…), shared by the
//! subcommands that boot a guest, with what `conformance` and `soak` add to them; and what
//! decides a run's outcome besides the guest's own status ([`Judging`]).

use clap::Args;

use crate::boot::devices::{self, DeviceFlags, Target};
use crate::boot::placement::Placement;
use crate::boot::qemu::{AccelChoice, Viommu};
use crate::setup::provision::Flavour;
use crate::soak;
use crate::suite::{suite_device_flags, SUITE_PACKAGE, TIMELINE_BINARY};

#[derive(Debug, Clone, Args)]
pub struct RunOpts {
    /// Number of Belfry devices to attach (default 1; `conformance` without `--devices` or
    /// `--device-flags` attaches the suite's layout, `belfry_suite_layout::LAYOUT`: device 0
    /// with default flags, then one device per configuration the suite's tests need — sixteen,
    /// the module's limit; under `--filter`, only those the selected tests need; at most 16).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub devices: Option<u16>,
    /// Extra belfry-device flags: I=FLAGS for device I (0-based) or all=FLAGS; repeatable.
    #[arg(long = "device-flags", value_name = "I=FLAGS")]
    pub device_flags: Vec<DeviceFlags>,
    /// Limit in seconds from QEMU's start to its exit (builds are not counted); default 900 on
    /// the distro kernel, 2400 on the (several times slower) debug kernel.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Extra kernel command line.
    #[arg(long, value_name = "STR", allow_hyphen_values = true)]
    pub kernel_append: Option<String>,
    /// Guest kernel: `distro` (Debian's packaged image, only its rust/ metadata built: a fast
    /// first run) or `debug` (built from source with DEBUG_ATOMIC_SLEEP and PANIC_ON_OOPS; what
    /// ci/test runs the suite on).
    #[arg(long = "kernel", value_enum, default_value_t = Flavour::Distro, value_name = "FLAVOUR")]
    pub kernel: Flavour,
    /// Do not load the module in the guest (and do not build it).
    #[arg(long)]
    pub no_module: bool,
    /// Keep the whole run directory on success (by default the initramfs is then removed;
    /// logs, traces and results are always kept).
    #[arg(long)]
    pub keep: bool,
    /// Run directories kept under the runs root when this run ends, this one included; older
    /// ones are removed (0 keeps all). Default: $BELFRY_KEEP_RUNS, else 10.
    #[arg(long, value_name = "N")]
    pub keep_runs: Option<usize>,
    /// Accelerator: auto picks KVM only where it truly works.
    #[arg(long, value_enum, default_value_t = AccelChoice::Auto)]
    pub accel: AccelChoice,
    /// Build workspace package PKG (binary BIN, default PKG) as a static guest binary and put
    /// it in the guest's /belfry/bin (on PATH); repeatable.
    #[arg(long = "guest-bin", value_name = "PKG[:BIN]")]
    pub guest_bins: Vec<String>,
    /// Put a virtual IOMMU in front of the devices: `intel` (QEMU's VT-d, caching mode; the
    /// distro kernel drives it, the debug kernel has no driver for it and runs untranslated)
    /// or `virtio` (virtio-iommu; the guest needs its `virtio_iommu` module). QEMU then carries
    /// the guest's IOVA mappings to each device as DMA_MAP/DMA_UNMAP per range.
    #[arg(long, value_enum, value_name = "KIND")]
    pub viommu: Option<Viommu>,
    /// Also attach QEMU's `edu` test device (`1234:11e8`): `belfry-bench`'s reference for the
    /// cost of one register write handled inside QEMU.
    #[arg(long)]
    pub edu: bool,
    /// Stream every build tool's, device's and QEMU's output and the whole guest console (by
    /// default they go to the run directory's logs).
    #[arg(short, long)]
    pub verbose: bool,
    /// Spin THREADS threads on the host while the guest runs, as a busy CI machine's other jobs
    /// do (a hunt with `conformance --repeat` sees the device threads and QEMU preempted).
    #[arg(long, value_name = "THREADS", default_value_t = 0)]
    pub load: u16,
    /// Where the guest and the devices run: `shared` (every CPU for everything) or
    /// `device-core` (the devices alone on the last CPU with a short slice, QEMU with one vCPU
    /// per other CPU), as a GPU is separate silicon. The run says what the host granted.
    #[arg(long, value_enum, default_value_t = Placement::Shared, value_name = "WHERE")]
    pub placement: Placement,
    /// Record every device's inputs (`belfry-device --record`) to `device<I>.record.gz` beside
    /// its trace, for `belfry-trace inputs`; the log's size is printed at the end of the run.
    #[arg(long)]
    pub record: bool,
    /// Record only these devices' inputs (comma-separated indices; implies `--record`): a
    /// whole suite's busiest devices log hundreds of MB that a replay of device 0 never reads.
    #[arg(long, value_delimiter = ',', value_name = "N,N")]
    pub record_devices: Vec<usize>,
    /// `conformance --filter`: the filters.
    #[arg(skip)]
    pub filters: Vec<String>,
    /// `conformance --repeat/--until-fail/--jobs/--fail-inject`: the suite's options for them.
    #[arg(skip)]
    pub suite_options: Vec<String>,
    /// The devices are the suite's default layout (chosen by `for_conformance`, not on the
    /// command line): a filter may reduce them.
    #[arg(skip)]
    pub suite_layout: bool,
    /// Build the C API's demo program for the guest (`conformance` with the suite).
    #[arg(skip)]
    pub c_demo: bool,
    /// `conformance --guests`: guests booted side by side, each running its shard of the
    /// suite (0 and 1: one guest, the whole selection).
    #[arg(skip)]
    pub guests: u16,
}

impl RunOpts {
    /// The run's limit in seconds: `--timeout` or the kernel flavour's default.
    pub fn timeout(&self) -> u64 {
        self.timeout.unwrap_or(self.kernel.default_timeout())
    }

    /// Whether device `index` records its inputs (`--record`, `--record-devices`).
    pub fn records(&self, index: usize) -> bool {
        if self.record_devices.is_empty() {
            self.record
        } else {
            self.record_devices.contains(&index)
        }
    }

    /// Guests to boot side by side (at least 1).
    pub fn guest_count(&self) -> usize {
        usize::from(self.guests.max(1))
    }

    /// Devices to attach.
    pub fn device_count(&self) -> u16 {
        self.devices.unwrap_or(1)
    }

    /// Attaches device 0 with default flags and one device per entry of `flags` after it.
    pub fn set_layout(&mut self, flags: &[&str]) {
        self.devices = Some(u16::try_from(flags.len() + 1).unwrap_or(1));
        self.device_flags.clear();
        for (index, flags) in flags.iter().enumerate() {
            let value = format!("{}={flags}", index + 1);
            if let Ok(flags) = value.parse() {
                self.device_flags.push(flags);
            }
        }
    }

    /// For `conformance`: the suite and timeline binaries in the guest (unless `--no-module`)
    /// and, unless the devices were chosen on the command line, the suite's device layout
    /// ([`suite_device_flags`]).
    pub fn for_conformance(mut self) -> Self {
        // `all=` flags alone keep the layout and go to every device of it (the whole suite
        // with, say, `--device-flags all=--no-cmd-ring`).
        if self.devices.is_none() && self.device_flags.iter().all(|f| f.target == Target::All) {
            let all = std::mem::take(&mut self.device_flags);
            self.set_layout(&suite_device_flags());
            self.device_flags.extend(all);
            self.suite_layout = true;
        }
        self.c_demo = !self.no_module;
        if !self.no_module && !self.guest_bins.iter().any(|b| b.split(':').next() == Some(SUITE_PACKAGE)) {
            self.guest_bins.push(SUITE_PACKAGE.to_string());
            self.guest_bins.push(format!("{SUITE_PACKAGE}:{TIMELINE_BINARY}"));
        }
        self
    }

    /// For `soak`: the soak's guest binary, a trace limit on every device, and a limit that
    /// gives the workload's `minutes` on top of the flavour's limit for a boot and setup.
    pub fn for_soak(mut self, minutes: f64) -> Self {
        self.guest_bins.push(soak::GUEST_BIN.into());
        if let Ok(flags) = format!("all=--trace-limit {}", soak::TRACE_LIMIT).parse() {
            self.device_flags.push(flags);
        }
        // CAST: a soak's seconds fit in u64.
        self.timeout = self.timeout.or(Some(self.kernel.default_timeout() + (minutes * 60.0) as u64));
        self
    }

    /// The indices of the devices with default flags (those the golden lspci file describes).
    pub fn default_devices(&self) -> Vec<usize> {
        let extra = devices::per_device_args(usize::from(self.device_count()), &self.device_flags).unwrap_or_default();
        (0..extra.len()).filter(|&i| extra[i].is_empty()).collect()
    }
}

/// What decides a run's outcome besides the guest's own status and the launcher's checks.
#[derive(Debug, Clone, Default)]
pub struct Judging {
    /// `conformance --bless`: rewrite the golden lspci file instead of comparing with it.
    pub bless: bool,
    /// `soak --max-device-rss`: the largest peak RSS a device may reach, in MiB.
    pub max_device_rss: Option<u64>,
}
