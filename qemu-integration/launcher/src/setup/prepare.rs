//! Everything a run does before the boot: the cargo builds (guest binaries, then the device,
//! with test-only fault injection only when a device of the run injects a fault), the guest
//! kernel, the module, QEMU's location and the initramfs, then the QEMU command line.
//!
//! The guest kernel (and with it the provisioning root) does not depend on the cargo
//! builds, so `provision.sh kernel` starts first and runs alongside them
//! ([`provision::Provision::start`]); on a cold machine its downloads and single-threaded
//! steps (mmdebstrap, tar) overlap with cargo's compiler jobs. `BELFRY_NO_OVERLAP=1` runs
//! the steps one after another (for measuring what the overlap gains).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::boot::devices::{self, DeviceSpec};
use crate::boot::placement::{self, CpuSplit, Pinning, Placement, SliceGrant};
use crate::boot::qemu::{self, Console, KvmProbe, QemuConfig};
use crate::boot::supervise::{ConsoleMode, Plan, Show, BOOT_STALL};
use crate::message::{say, BoxError};
use crate::options::RunOpts;
use crate::run_dir::RunDir;
use crate::setup::guest::{self, RunScript, Task};
use crate::setup::provision::{self, KernelTree};
use crate::setup::steps::Steps;
use crate::setup::{boot_image, compile, filter, selftests};
use crate::suite::{suite_device_flags, SUITE_PACKAGE};
use crate::sys;

/// Everything decided before the boot, for the summary.
pub struct Prepared {
    /// One per guest (`conformance --guests`), each with its run directory; taken by the run.
    pub plans: Vec<(RunDir, Plan)>,
    /// The accelerator and why.
    pub accel: String,
    /// From the start of the builds to the boot.
    pub build_time: Duration,
    /// The run's time limit.
    pub timeout: Duration,
    /// `--placement`: `shared`, or the CPU split and the slice the host granted.
    pub placement: String,
    /// The host's load averages just before the boot.
    pub load_before_boot: Option<String>,
}

/// The guest kernel: given (`BELFRY_KERNEL`), being provisioned alongside the builds, or
/// not yet asked for.
enum KernelJob {
    Given(KernelTree),
    Running(provision::Pending),
    Later,
}

/// Ends a kernel job: waits for it (one step line, its time the wait; how long it ran in all
/// goes to `summary.txt`) or provisions it now.
fn kernel_now(job: KernelJob, provision: &provision::Provision, steps: &mut Steps) -> Result<KernelTree, BoxError> {
    let flavour = provision.flavour.name();
    match job {
        KernelJob::Given(tree) => Ok(tree),
        KernelJob::Running(pending) => {
            let label = format!("provision: guest kernel ({flavour}, alongside the builds), waited");
            let (answer, ran) = steps.run(&label, |_| pending.finish())?;
            steps.done.push((format!("provision: guest kernel ({flavour}), ran alongside the builds"), ran));
            Ok(provision::kernel_tree(answer)?)
        }
        KernelJob::Later => Ok(steps.run(&format!("provision: guest kernel ({flavour})"), |_| provision.kernel())?),
    }
}

/// What to boot for a provisioned tree's image `boot`: its kernel through the PVH entry
/// ([`boot_image::pvh_image`], kept under the cargo target's `belfry-kernels/`), or `boot`
/// itself when it has no such kernel or taking it out failed (said, not fatal).
fn pvh_boot(boot: &Path, target_dir: &Path, steps: &mut Steps) -> PathBuf {
    let images = target_dir.join("belfry-kernels");
    match steps.run("provision: the kernel's PVH image", |_| boot_image::pvh_image(boot, &images)) {
        Ok(Some(image)) => image,
        Ok(None) => boot.to_path_buf(),
        Err(e) => {
            say(format_args!("kernel: {} boots as it is: its PVH image: {e}", boot.display()));
            boot.to_path_buf()
        }
    }
}

/// Builds and provisions what the run needs (in the workspace `ws`, with the run directory
/// `run`) and returns the plan of the run; `--filter` may reduce `opts`' devices.
pub fn prepare(
    task: &Task,
    opts: &mut RunOpts,
    run: &RunDir,
    ws: &compile::Workspace,
    steps: &mut Steps,
) -> Result<Prepared, BoxError> {
    let repo = ws.repo.as_path();
    let build_start = Instant::now();
    let (accel, why) = qemu::choose_accel(opts.accel, KvmProbe::host());
    say(format_args!("accelerator: {accel} ({why})"));

    let mut provision = provision::Provision::new(repo);
    provision.output = steps.output.clone();
    provision.flavour = opts.kernel;
    let overlap = std::env::var_os("BELFRY_NO_OVERLAP").is_none_or(|v| v.is_empty() || v == "0");
    let kernel_job = match env_path("BELFRY_KERNEL") {
        Some(image) => {
            say(format_args!("kernel: {} (BELFRY_KERNEL, not provisioned)", image.display()));
            let dir = image.parent().map(Path::to_path_buf).unwrap_or_default();
            KernelJob::Given(KernelTree { dir, boot: image, append: None })
        }
        None if overlap => KernelJob::Running(provision.start("kernel", &[])?),
        None => KernelJob::Later,
    };

    let mut binaries = Vec::new();
    for spec in &opts.guest_bins {
        let (package, name) = spec.split_once(':').unwrap_or((spec, spec));
        let label = format!("build: guest binary {name} of {package} (static)");
        binaries.push(steps.run(&label, |_| ws.build_guest_binary(package, name))?);
        check_signal()?;
    }

    // The devices are known once the filter has chosen them: the device binary is built after.
    let mut suite_args = opts.suite_options.clone();
    suite_args.extend(select_tests(opts, &binaries)?);
    let count = usize::from(opts.device_count());
    let extra = devices::per_device_args(count, &opts.device_flags)?;
    let device_binary = build_device(ws, steps, devices::inject_faults(&extra))?;
    check_signal()?;

    let provisioned = !matches!(kernel_job, KernelJob::Given(_));
    let mut kernel = kernel_now(kernel_job, &provision, steps)?;
    check_signal()?;
    if provisioned {
        kernel.boot = pvh_boot(&kernel.boot, &ws.target_dir, steps);
    }

    let module = match (opts.no_module, env_path("BELFRY_KMOD")) {
        (true, _) => None,
        (false, Some(module)) => {
            say(format_args!("module: {} (BELFRY_KMOD, not built)", module.display()));
            Some(module)
        }
        (false, None) => {
            let module = steps.run("build: belfry.ko (provision.sh kmod)", |_| {
                provision.kmod(&repo.join("guest-driver/kmod"), "belfry.ko")
            })?;
            check_signal()?;
            Some(module)
        }
    };

    if opts.c_demo {
        let label = "build: libbelfry_umd_c.a (static, guest)";
        let lib = steps.run(label, |_| ws.build_guest_staticlib(compile::C_API_PACKAGE, "belfry_umd_c"))?;
        check_signal()?;
        binaries.push(steps.run("build: belfry-c-demo (provision.sh cc)", |_| compile::c_demo(ws, &provision, &lib))?);
        check_signal()?;
        let label = "build: libbelfry_d3dkmt.a (static, guest)";
        let lib = steps.run(label, |_| ws.build_guest_staticlib(compile::D3DKMT_PACKAGE, "belfry_d3dkmt"))?;
        check_signal()?;
        let label = "build: belfry-d3dkmt programs (provision.sh cc)";
        binaries.extend(steps.run(label, |_| compile::d3dkmt_programs(ws, &provision, &lib))?);
        check_signal()?;
    }

    let mut extra_adds = Vec::new();
    if let Task::Selftests(tests) = task {
        let label = "build: Linux's VFIO selftests and the image's VFIO modules (provision.sh)";
        extra_adds = steps.run(label, |_| selftests::build(ws, &provision, tests))?;
        check_signal()?;
    }

    let location = steps.run("provision: QEMU", |_| provision.qemu())?;
    check_signal()?;

    let (split, pinning, placement) = placement(opts)?;
    let guests = opts.guest_count();
    if guests > 1 && (split.is_some() || !matches!(task, Task::Conformance) || opts.no_module) {
        return Err("--guests above 1 needs the suite (conformance, not --no-module) and --placement shared".into());
    }
    let common = Common {
        repo,
        task,
        opts,
        provision: &provision,
        location: &location,
        kernel: &kernel,
        accel,
        device_binary: &device_binary,
        device_args: &extra,
        module: module.as_deref(),
        binaries: &binaries,
        extra_adds: &extra_adds,
        split: split.as_ref(),
        pinning: pinning.as_ref(),
    };
    let mut plans = Vec::new();
    for n in 1..=guests {
        let dir = run.guest(n, guests)?;
        let mut args = suite_args.clone();
        if guests > 1 {
            args.push(format!("--shard={n}/{guests}"));
            args.push(format!("--durations={}", opts.kernel.suite_durations()));
        }
        let label = (guests > 1).then(|| format!("guest {n}"));
        let plan = common.guest_plan(&dir, args, label, guest::reload_share(n, guests), steps)?;
        plans.push((dir, plan));
    }
    Ok(Prepared {
        plans,
        accel: format!("{accel} ({why})"),
        build_time: build_start.elapsed(),
        timeout: Duration::from_secs(opts.timeout()),
        placement,
        load_before_boot: sys::load_average(),
    })
}

/// What every guest of a run shares: the task, the options, what was built and provisioned.
struct Common<'a> {
    repo: &'a Path,
    task: &'a Task,
    opts: &'a RunOpts,
    provision: &'a provision::Provision,
    location: &'a provision::QemuLocation,
    kernel: &'a KernelTree,
    accel: qemu::Accel,
    device_binary: &'a Path,
    /// Each device's extra flags.
    device_args: &'a [Vec<String>],
    module: Option<&'a Path>,
    binaries: &'a [PathBuf],
    extra_adds: &'a [(PathBuf, String)],
    split: Option<&'a CpuSplit>,
    pinning: Option<&'a Pinning>,
}

impl Common<'_> {
    /// The plan of one guest whose files go to `run`: its `/belfry/run` script (the suite given
    /// `suite_args`), its initramfs, its devices and its QEMU command; `label` names it on the
    /// terminal when several guests run; `reloads` its share of the reload loop.
    fn guest_plan(
        &self,
        run: &RunDir,
        suite_args: Vec<String>,
        label: Option<String>,
        reloads: u32,
        steps: &mut Steps,
    ) -> Result<Plan, BoxError> {
        let (task, opts, provision) = (self.task, self.opts, self.provision);
        let interactive = matches!(task, Task::Shell);
        // The launcher can wake a sleeping guest only when it reads the console.
        let qmp = if interactive { None } else { Some(run.qmp_socket()?) };
        let devices = self.device_args.len();
        let script = RunScript {
            task: task.clone(),
            devices,
            load_module: !opts.no_module,
            suite_args,
            wake: qmp.is_some(),
            reloads,
        };
        let script_path = run.guest_run_script();
        std::fs::write(&script_path, script.render())?;
        set_executable(&script_path)?;
        let scripts = guest::guest_scripts(self.repo)?;
        let adds = guest::initramfs_adds(&script_path, &scripts, self.module, self.binaries, self.extra_adds);
        let step = match &label {
            Some(label) => format!("provision: initramfs ({label})"),
            None => "provision: initramfs".to_string(),
        };
        let initrd = steps.run(&step, |_| provision.initramfs(&run.initramfs(), &adds))?;
        check_signal()?;

        let mut specs = Vec::new();
        for (index, extra) in self.device_args.iter().enumerate() {
            specs.push(DeviceSpec {
                index,
                socket: run.socket(index)?,
                trace: run.device_trace(index),
                log: run.device_log(index),
                record: opts.records(index).then(|| run.device_record(index)),
                extra: extra.clone(),
                pinning: self.pinning.cloned(),
            });
        }
        let append_extra = join_append(&[
            self.kernel.append.as_deref(),
            opts.kernel.boot_args(),
            opts.viommu.and_then(|v| v.boot_args()),
            opts.kernel_append.as_deref(),
        ]);
        let config = QemuConfig {
            accel: self.accel,
            memory: if matches!(task, Task::Selftests(_)) { selftests::GUEST_MEMORY } else { "1G" }.into(),
            smp: self.split.map_or(2, |split| split.vcpus(2)),
            kernel: self.kernel.boot.clone(),
            initrd,
            append_extra,
            console: if interactive { Console::Terminal { log: run.console_log() } } else { Console::Pipe },
            results: run.results(),
            sockets: specs.iter().map(|s| s.socket.clone()).collect(),
            edu: opts.edu,
            viommu: opts.viommu,
            qmp: qmp.clone(),
        };
        let binds = qemu::bind_dirs(&config, &run.path);
        let qemu_args = config.args();
        let mut qemu = provision.qemu_command(self.location, &binds, &qemu_args);
        if let Some(split) = self.split {
            placement::pin(&mut qemu, &split.guest, None);
        }
        std::fs::write(
            run.path.join("qemu-command.txt"),
            format!(
                "{} {}\n",
                qemu.get_program().to_string_lossy(),
                qemu.get_args().map(|a| guest::sh_quote(&a.to_string_lossy())).collect::<Vec<_>>().join(" ")
            ),
        )?;
        let show = match (opts.verbose, task) {
            (true, _) => Show::All,
            (false, Task::Conformance) => Show::Headlines,
            (false, _) => Show::GuestConsole,
        };
        Ok(Plan {
            device_binary: self.device_binary.to_path_buf(),
            devices: specs,
            qemu,
            console_mode: if interactive { ConsoleMode::Terminal } else { ConsoleMode::Stream },
            console_log: run.console_log(),
            qemu_log: run.qemu_log(),
            timeout: Duration::from_secs(opts.timeout()),
            show,
            qmp,
            label,
            boot_stall: (!interactive).then_some(BOOT_STALL),
        })
    }
}

/// The device binary: `BELFRY_DEVICE_BIN`, or `belfry-device` built (release) with the
/// test-only `fault-injection` feature exactly when `inject` (a device of the run is given an
/// `--inject` flag), so a run without injections runs the device a release build gives.
///
/// Both builds leave their binary at one path of the target directory, so each is copied to a
/// name of its own (`belfry-device.fault-injection`, `belfry-device.release`) under a lock on
/// the target directory: runs started side by side in one checkout each start the device they
/// built, never the other's.
fn build_device(ws: &compile::Workspace, steps: &mut Steps, inject: bool) -> Result<PathBuf, BoxError> {
    if let Some(binary) = env_path("BELFRY_DEVICE_BIN") {
        say(format_args!("device: {} (BELFRY_DEVICE_BIN, not rebuilt)", binary.display()));
        return Ok(binary);
    }
    let (label, features, variant): (_, &[&str], _) = if inject {
        ("build: belfry-device (cargo, release, test-only fault injection)", &["fault-injection"], "fault-injection")
    } else {
        ("build: belfry-device (cargo, release)", &[], "release")
    };
    steps.run(label, |_| -> Result<PathBuf, BoxError> {
        std::fs::create_dir_all(&ws.target_dir)?;
        let lock = std::fs::File::create(ws.target_dir.join(".belfry-device-build.lock"))?;
        lock.lock()?;
        let built = ws.build_host_binary("belfry-device", "belfry-device", features)?;
        let copy = built.with_file_name(format!("belfry-device.{variant}"));
        let partial = built.with_file_name(format!(".belfry-device.{variant}.partial"));
        std::fs::copy(&built, &partial)?;
        std::fs::rename(&partial, &copy)?;
        Ok(copy)
    })
}

/// `--placement`: the CPU split and the devices' pinning (none for `shared`), said on the
/// run's output with what the host granted.
fn placement(opts: &RunOpts) -> Result<(Option<CpuSplit>, Option<Pinning>, String), BoxError> {
    if opts.placement == Placement::Shared {
        return Ok((None, None, "shared".into()));
    }
    let split = CpuSplit::of(&placement::available_cpus()?)?;
    let grant = placement::probe_slice(placement::DEVICE_SLICE);
    let described = split.describe(&grant);
    say(format_args!("placement: {described}"));
    let slice = match grant {
        SliceGrant::Short(slice) => Some(slice),
        SliceGrant::Refused(_) => None,
    };
    let pinning = Pinning { cpus: split.devices.clone(), slice };
    Ok((Some(split), Some(pinning), described))
}

/// Stops the run if a termination signal arrived during a build step.
fn check_signal() -> Result<(), BoxError> {
    match sys::pending_signal() {
        Some(signal) => Err(format!("interrupted by {}", sys::signal_name(signal)).into()),
        None => Ok(()),
    }
}

/// The kernel arguments in order: the image's (its manifest), the flavour's
/// (`Flavour::boot_args`), then the user's (`--kernel-append`, which can override them: the
/// kernel takes the last of a repeated parameter).
fn join_append(sources: &[Option<&str>]) -> Option<String> {
    let parts: Vec<&str> = sources.iter().flatten().map(|s| s.trim()).filter(|s| !s.is_empty()).collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// For `conformance --filter`: resolves the filters against the suite's own listing (the
/// built suite binary, run on the host with `--list`), reduces the suite's default device
/// layout to the devices the selected tests need, and returns the suite's arguments (the
/// selected test names).
fn select_tests(opts: &mut RunOpts, binaries: &[PathBuf]) -> Result<Vec<String>, BoxError> {
    if opts.filters.is_empty() {
        return Ok(Vec::new());
    }
    let suite = binaries
        .iter()
        .find(|b| b.file_name().is_some_and(|n| n == SUITE_PACKAGE))
        .ok_or("--filter needs the conformance suite, which --no-module leaves out")?;
    let all = filter::list(suite, &[])?;
    let names: Vec<String> = filter::resolve(&opts.filters, &all)?.iter().map(|t| t.name.clone()).collect();
    // The suite selects by substring: ask it which tests these names select, exactly.
    let runs = filter::list(suite, &names)?;
    let selected: Vec<&filter::Listed> = runs.iter().collect();
    if opts.suite_layout {
        let flags = filter::devices_for(&selected, &suite_device_flags());
        let flags: Vec<&str> = flags.iter().skip(1).map(String::as_str).collect();
        opts.set_layout(&flags);
    }
    say(format_args!("filter: {} of {} tests selected, {} device(s)", selected.len(), all.len(), opts.device_count()));
    Ok(names)
}

/// A path from a non-empty environment variable.
fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

fn set_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flavour_arguments_come_before_the_users() {
        assert_eq!(join_append(&[Some("oops=panic"), Some("quiet")]).as_deref(), Some("oops=panic quiet"));
        assert_eq!(join_append(&[Some("oops=panic"), None]).as_deref(), Some("oops=panic"));
        assert_eq!(join_append(&[None, Some(" rdinit=/x ")]).as_deref(), Some("rdinit=/x"));
        assert_eq!(join_append(&[None, Some("  ")]), None);
        assert_eq!(join_append(&[None, None]), None);
        assert_eq!(
            join_append(&[None, provision::Flavour::Debug.boot_args(), Some("quiet")]).as_deref(),
            Some("page_poison=1 pty.legacy_count=0 quiet")
        );
    }
}
