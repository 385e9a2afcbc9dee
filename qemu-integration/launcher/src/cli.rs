//! The command line of `cargo belfry`: its subcommands and options (clap), and how each
//! subcommand becomes a run's task, options and judging.

use clap::{Parser, Subcommand};

use crate::boot::qemu::Viommu;
use crate::options::{Judging, RunOpts};
use crate::setup::guest::Task;
use crate::setup::selftests;
use crate::{outcome, soak};

/// Boot QEMU with Belfry devices and run a task in the guest.
#[derive(Debug, Parser)]
#[command(name = "cargo belfry", bin_name = "cargo belfry", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load the module, check every device, then run the in-guest conformance suite.
    Conformance {
        #[command(flatten)]
        opts: RunOpts,
        /// Rewrite qemu-integration/golden/lspci.txt from this run's listing.
        #[arg(long)]
        bless: bool,
        /// Run only the tests a filter selects: a rule family (FEN) with the suite file of that
        /// name (fen), a suite file (hostile), a rule id (FEN-01) or part of a test name;
        /// repeatable. Without --devices/--device-flags only the devices those tests need are
        /// attached.
        #[arg(long = "filter", value_name = "NAME|RULE-ID|FAMILY|FILE")]
        filters: Vec<String>,
        /// Run the selection N times in one boot (the suite's `--repeat`); the failing
        /// iterations' stretches of the device traces are kept in `iteration-K/` of the run
        /// directory. Give a `--timeout` that fits N iterations.
        #[arg(long, value_name = "N")]
        repeat: Option<u32>,
        /// Stop after the first iteration with a failure (at most --repeat N; without it, until
        /// a failure or the timeout).
        #[arg(long)]
        until_fail: bool,
        /// Run up to N tests at once (the suite's `--jobs`; its default is 2); 1 runs them one
        /// after another in registry order.
        #[arg(long, value_name = "N")]
        jobs: Option<u32>,
        /// Fail PERCENT % of the kernel allocations the tests make with the module's code on
        /// the stack (the suite's `--fail-inject`: failslab and fail_page_alloc; the debug
        /// kernel has them). Each test then passes when the module's objects return to where
        /// they were, whatever its own checks made of the failures; it proves no rule.
        #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(1..=100))]
        fail_inject: Option<u32>,
        /// Boot N guests side by side, each with its own devices, and give each a share of the
        /// tests (the suite's `--shard K/N`); their results are merged in registry order, guest
        /// K's files in `guest<K>/` of the run directory. Default: 2 on the distro kernel for the
        /// whole suite on its device layout (no --filter, --devices, --repeat, --until-fail or
        /// --fail-inject; --device-flags only for all=) with --placement shared, and on the debug
        /// kernel each guest then runs one test at a time unless --jobs says otherwise; else 1.
        /// Above 1 not with --repeat or --until-fail.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=4))]
        guests: Option<u16>,
    },
    /// An interactive guest shell with the device(s); Ctrl-C ends everything.
    Shell {
        #[command(flatten)]
        opts: RunOpts,
    },
    /// Run a command in the guest (after insmod) and exit with its status.
    Exec {
        #[command(flatten)]
        opts: RunOpts,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Soak: `belfry-soak` runs a mixed workload across processes in the guest for N minutes
    /// and checks guest memory, the module's objects and kernel warnings; the launcher then
    /// bounds each device's peak RSS and trace size.
    Soak {
        #[command(flatten)]
        opts: RunOpts,
        /// How long the workload runs (fractions allowed).
        #[arg(long, default_value_t = 1.0)]
        minutes: f64,
        /// Worker processes in the guest.
        #[arg(long, default_value_t = 3)]
        workers: u32,
        /// Largest peak RSS a device may reach, in MiB.
        #[arg(long, default_value_t = 1024, value_name = "MIB")]
        max_device_rss: u64,
    },
    /// Linux's own VFIO selftests against the first device: built from the provisioning root's
    /// kernel source, run in the guest (distro kernel, `--viommu intel` unless another is
    /// given) with the device unbound from belfry and bound to vfio-pci; their KTAP output is
    /// saved as `selftests.ktap` in the run directory and counted.
    Selftests {
        #[command(flatten)]
        opts: RunOpts,
        /// Run only these selftests (repeatable); default: all of them in order.
        #[arg(long = "test", value_name = "NAME")]
        tests: Vec<String>,
    },
    /// Check what a run needs (toolchain, disk, cache, KVM, namespaces, QEMU) and say how to
    /// fix each problem.
    Doctor,
    /// Remove run directories under the runs root (target/belfry-runs, or $BELFRY_RUNS): all
    /// but the newest N, or all.
    Clean {
        /// Run directories kept, newest first. Default: $BELFRY_KEEP_RUNS, else 10.
        #[arg(long, value_name = "N", conflicts_with = "all")]
        keep_runs: Option<usize>,
        /// Remove every run directory.
        #[arg(long)]
        all: bool,
    },
}

/// What the command line asks for: a run, the doctor's checks, or removing run directories.
pub enum Request {
    Run {
        task: Task,
        /// Boxed: the options are most of the request's size.
        opts: Box<RunOpts>,
        judging: Judging,
    },
    Doctor,
    /// Remove run directories: all but the newest `keep` (`None`: the default count), or all.
    Clean {
        keep: Option<usize>,
        all: bool,
    },
}

impl Cli {
    /// The command line, parsed and checked ([`Cli::check`]); exits with clap's usage error
    /// otherwise.
    #[must_use]
    pub fn parse_checked() -> Cli {
        let cli = <Cli as clap::Parser>::parse();
        if let Err(e) = cli.check() {
            e.exit();
        }
        cli
    }

    /// What clap's declarations cannot say: several guests cannot repeat the suite (each guest
    /// runs a share of one pass), one guest can.
    ///
    /// # Errors
    /// The conflict, as clap's usage error.
    pub fn check(&self) -> Result<(), clap::Error> {
        if let Command::Conformance { guests: Some(n), repeat, until_fail, .. } = &self.command {
            if *n > 1 && (repeat.is_some() || *until_fail) {
                return Err(<Cli as clap::CommandFactory>::command().error(
                    clap::error::ErrorKind::ArgumentConflict,
                    "--guests above 1 cannot be used with --repeat or --until-fail: each guest runs a share of one pass of the suite",
                ));
            }
        }
        Ok(())
    }

    /// The request of this command line.
    pub fn request(self) -> Request {
        let (task, opts, judging) = match self.command {
            Command::Conformance { mut opts, bless, filters, repeat, until_fail, jobs, fail_inject, guests } => {
                let whole_suite = filters.is_empty() && repeat.is_none() && !until_fail && fail_inject.is_none();
                opts.filters = filters;
                opts.suite_options = outcome::iterations::suite_args(repeat, until_fail);
                if let Some(n) = jobs {
                    opts.suite_options.extend(["--jobs".to_string(), n.to_string()]);
                }
                if let Some(percent) = fail_inject {
                    opts.suite_options.extend(["--fail-inject".to_string(), percent.to_string()]);
                }
                let mut opts = opts.for_conformance();
                // The whole suite on its own device layout is what several guests share out.
                let shared = opts.placement == crate::boot::placement::Placement::Shared;
                let sharded = whole_suite && opts.suite_layout && shared && !opts.no_module;
                opts.guests = guests.unwrap_or(if sharded { opts.kernel.suite_guests() } else { 1 });
                if let (None, true, Some(n)) = (jobs, opts.guests > 1, opts.kernel.suite_jobs()) {
                    opts.suite_options.extend(["--jobs".to_string(), n.to_string()]);
                }
                (Task::Conformance, opts, Judging { bless, ..Judging::default() })
            }
            Command::Shell { opts } => (Task::Shell, opts, Judging::default()),
            Command::Exec { opts, command } => (Task::Exec(command), opts, Judging::default()),
            Command::Soak { opts, minutes, workers, max_device_rss } => {
                let judging = Judging { max_device_rss: Some(max_device_rss), ..Judging::default() };
                (Task::Exec(soak::command(minutes, workers)), opts.for_soak(minutes), judging)
            }
            Command::Selftests { mut opts, mut tests } => {
                if tests.is_empty() {
                    tests = selftests::SELFTESTS.map(String::from).to_vec();
                }
                opts.viommu = opts.viommu.or(Some(Viommu::Intel));
                (Task::Selftests(tests), opts, Judging::default())
            }
            Command::Doctor => return Request::Doctor,
            Command::Clean { keep_runs, all } => return Request::Clean { keep: keep_runs, all },
        };
        Request::Run { task, opts: Box::new(opts), judging }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boot::devices::Target;
    use crate::boot::qemu::AccelChoice;

    #[test]
    fn conformance_flags_parse() {
        let cli = Cli::try_parse_from([
            "belfry-launcher",
            "conformance",
            "--devices",
            "2",
            "--device-flags",
            "1=--inject no-interrupts",
            "--device-flags=all=--vram-size 16M",
            "--kernel-append",
            "rdinit=/no-such-init",
            "--bless",
        ])
        .unwrap();
        let Command::Conformance { opts, bless, filters, repeat, until_fail, .. } = cli.command else {
            panic!("not conformance")
        };
        assert!(filters.is_empty());
        assert_eq!((repeat, until_fail, opts.load), (None, false, 0));
        assert!(!opts.verbose);
        assert!(bless);
        assert_eq!(opts.devices, Some(2));
        assert_eq!(opts.timeout(), 900);
        assert_eq!(opts.accel, AccelChoice::Auto);
        assert_eq!(opts.device_flags[0].target, Target::Index(1));
        assert_eq!(opts.device_flags[0].args, vec!["--inject", "no-interrupts"]);
        assert_eq!(opts.device_flags[1].target, Target::All);
        assert_eq!(opts.kernel_append.as_deref(), Some("rdinit=/no-such-init"));
    }

    #[test]
    fn clean_and_keep_runs_are_parsed() {
        let keep = |args: &[&str]| match Cli::try_parse_from(args).unwrap().request() {
            Request::Clean { keep, all } => (keep, all),
            _ => panic!("not clean"),
        };
        assert_eq!(keep(&["belfry-launcher", "clean"]), (None, false));
        assert_eq!(keep(&["belfry-launcher", "clean", "--keep-runs", "3"]), (Some(3), false));
        assert_eq!(keep(&["belfry-launcher", "clean", "--all"]), (None, true));
        assert!(Cli::try_parse_from(["belfry-launcher", "clean", "--all", "--keep-runs", "3"]).is_err());
        let cli = Cli::try_parse_from(["belfry-launcher", "exec", "--keep-runs", "0", "--", "true"]).unwrap();
        let Request::Run { opts, .. } = cli.request() else { panic!("not a run") };
        assert_eq!(opts.keep_runs, Some(0));
    }

    #[test]
    fn repeat_until_fail_and_load_are_parsed() {
        let cli = Cli::try_parse_from([
            "belfry-launcher",
            "conformance",
            "--filter",
            "multi_fence",
            "--repeat",
            "500",
            "--until-fail",
            "--load",
            "2",
        ])
        .unwrap();
        let Command::Conformance { opts, repeat, until_fail, .. } = cli.command else { panic!("not conformance") };
        assert_eq!((repeat, until_fail, opts.load), (Some(500), true, 2));
    }

    #[test]
    fn record_devices_choose_which_devices_record() {
        let opts = |args: &[&str]| match Cli::try_parse_from(args).unwrap().request() {
            Request::Run { opts, .. } => opts,
            _ => panic!("not a run"),
        };
        let none = opts(&["belfry-launcher", "conformance"]);
        assert!(!none.records(0));
        let all = opts(&["belfry-launcher", "conformance", "--record"]);
        assert!(all.records(0) && all.records(11));
        let some = opts(&["belfry-launcher", "conformance", "--record-devices", "0,3"]);
        assert!(some.records(0) && some.records(3) && !some.records(11));
    }

    #[test]
    fn jobs_goes_to_the_suite() {
        let cli = Cli::try_parse_from(["belfry-launcher", "conformance", "--jobs", "1"]).unwrap();
        let Request::Run { opts, .. } = cli.request() else { panic!("not a run") };
        assert_eq!(opts.suite_options, ["--jobs", "1"]);
    }

    #[test]
    fn the_debug_kernels_whole_suite_runs_one_test_at_a_time_in_each_of_two_guests() {
        let suite_options = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["belfry-launcher", "conformance"][..], args].concat()).unwrap();
            let Request::Run { opts, .. } = cli.request() else { panic!("not a run") };
            (opts.guests, opts.suite_options.join(" "))
        };
        assert_eq!(suite_options(&["--kernel", "debug"]), (2, "--jobs 1".into()));
        assert_eq!(suite_options(&["--kernel", "debug", "--jobs", "2"]), (2, "--jobs 2".into()), "the user's --jobs");
        assert_eq!(
            suite_options(&["--kernel", "debug", "--guests", "1"]),
            (1, String::new()),
            "one guest: the default"
        );
        assert_eq!(suite_options(&["--kernel", "debug", "--filter", "fen"]), (1, String::new()));
        assert_eq!(suite_options(&[]), (2, String::new()), "the distro kernel: the suite's default");
    }

    #[test]
    fn the_whole_suite_runs_across_two_guests_a_selection_in_one() {
        let guests = |args: &[&str]| {
            let argv = ["belfry-launcher", "conformance"].iter().chain(args).copied();
            let Request::Run { opts, .. } = Cli::try_parse_from(argv).unwrap().request() else { panic!("not a run") };
            opts.guest_count()
        };
        assert_eq!(guests(&[]), 2);
        assert_eq!(guests(&["--kernel", "debug"]), 2);
        assert_eq!(guests(&["--kernel", "kcsan"]), 1);
        assert_eq!(guests(&["--kernel", "debug", "--guests", "2"]), 2);
        for one in [&["--filter", "fen"][..], &["--fail-inject", "1"], &["--repeat", "3"], &["--until-fail"]] {
            assert_eq!(guests(one), 1, "{one:?}");
        }
        assert_eq!(guests(&["--placement", "device-core"]), 1);
        assert_eq!(guests(&["--device-flags", "0=--inject bad-identity"]), 1, "devices of the user's choosing");
        assert_eq!(guests(&["--device-flags", "all=--no-cmd-ring"]), 2, "the suite's layout, every device with a flag");
        assert_eq!(guests(&["--no-module"]), 1);
        assert_eq!(guests(&["--guests", "3", "--filter", "fen"]), 3);
        assert_eq!(guests(&["--guests", "1"]), 1);
        let checked = |args: &[&str]| {
            let argv = ["belfry-launcher", "conformance"].iter().chain(args).copied();
            Cli::try_parse_from(argv).and_then(|cli| cli.check())
        };
        for bad in [
            &["--guests", "0"][..],
            &["--guests", "5"],
            &["--guests", "2", "--repeat", "2"],
            &["--guests", "3", "--until-fail"],
        ] {
            assert!(checked(bad).is_err(), "{bad:?}");
        }
        for good in [&["--guests", "1", "--repeat", "2"][..], &["--guests", "1", "--until-fail"], &["--repeat", "2"]] {
            assert!(checked(good).is_ok(), "{good:?}");
        }
        assert_eq!(guests(&["--guests", "1", "--repeat", "2"]), 1);
    }

    #[test]
    fn fail_inject_goes_to_the_suite_as_a_percentage() {
        let cli = Cli::try_parse_from(["belfry-launcher", "conformance", "--fail-inject", "1"]).unwrap();
        let Request::Run { opts, .. } = cli.request() else { panic!("not a run") };
        assert_eq!(opts.suite_options, ["--fail-inject", "1"]);
        for bad in ["0", "101", "x"] {
            assert!(Cli::try_parse_from(["belfry-launcher", "conformance", "--fail-inject", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn conformance_defaults_to_the_suite_layout_and_binary() {
        let cli = Cli::try_parse_from(["belfry-launcher", "conformance"]).unwrap();
        let Command::Conformance { opts, .. } = cli.command else { panic!("not conformance") };
        let opts = opts.for_conformance();
        assert_eq!(usize::from(opts.device_count()), belfry_suite_layout::LAYOUT.len());
        assert_eq!(opts.device_flags[0].target, Target::Index(1));
        assert_eq!(opts.device_flags[0].args, vec!["--doorbells", "2"]);
        assert_eq!(opts.device_flags[1].args, vec!["--doorbell-model", "global"]);
        assert_eq!(opts.device_flags[4].target, Target::Index(5));
        assert_eq!(opts.device_flags[4].args, vec!["--interrupt-form", "scan-all"]);
        assert_eq!(opts.device_flags[5].target, Target::Index(6));
        assert_eq!(opts.device_flags[5].args[..2], ["--inject", "slow-monitored-updates"]);
        assert_eq!(opts.device_flags[6].target, Target::Index(7));
        assert_eq!(opts.device_flags[6].args, vec!["--inject", "no-fence-interrupts"]);
        assert_eq!(opts.device_flags[7].target, Target::Index(8));
        assert_eq!(opts.device_flags[7].args, vec!["--inject", "mailbox-stall"]);
        assert_eq!(opts.device_flags[8].target, Target::Index(9));
        assert_eq!(opts.device_flags[8].args, vec!["--no-native-fences"]);
        assert_eq!(opts.device_flags[9].target, Target::Index(10));
        assert_eq!(opts.device_flags[9].args, vec!["--doorbell-transport", "shared", "--peer-signals"]);
        assert_eq!(opts.device_flags[11].args, vec!["--no-cmd-ring"]);
        assert_eq!(opts.device_flags[14].target, Target::Index(15));
        assert_eq!(opts.device_flags[14].args, vec!["--peer-signals"]);
        assert_eq!(opts.guest_bins, vec!["belfry-conformance", "belfry-conformance:belfry-timeline"]);
        let cli =
            Cli::try_parse_from(["belfry-launcher", "conformance", "--device-flags", "all=--no-cmd-ring"]).unwrap();
        let Command::Conformance { opts, .. } = cli.command else { panic!("not conformance") };
        let opts = opts.for_conformance();
        assert_eq!(usize::from(opts.device_count()), belfry_suite_layout::LAYOUT.len(), "all= keeps the layout");
        assert_eq!(opts.device_flags.last().map(|f| f.target), Some(Target::All));
        let cli = Cli::try_parse_from(["belfry-launcher", "conformance", "--devices", "2", "--no-module"]).unwrap();
        let Command::Conformance { opts, .. } = cli.command else { panic!("not conformance") };
        let opts = opts.for_conformance();
        assert_eq!((opts.device_count(), opts.device_flags.len(), opts.guest_bins.len()), (2, 0, 0));
    }

    #[test]
    fn filters_and_verbosity_parse_and_a_layout_can_shrink() {
        let cli = Cli::try_parse_from(["belfry-launcher", "conformance", "-v", "--filter", "FEN", "--filter=RACE-06"])
            .unwrap();
        let Command::Conformance { mut opts, filters, .. } = cli.command else { panic!("not conformance") };
        assert!(opts.verbose);
        opts.filters = filters;
        let mut opts = opts.for_conformance();
        assert_eq!(opts.filters, vec!["FEN", "RACE-06"]);
        assert!(opts.suite_layout);
        opts.set_layout(&["--inject no-fence-interrupts"]);
        assert_eq!(opts.device_count(), 2);
        assert_eq!(opts.device_flags.len(), 1);
        assert_eq!(opts.device_flags[0].target, Target::Index(1));
        assert_eq!(opts.device_flags[0].args, vec!["--inject", "no-fence-interrupts"]);
        let cli = Cli::try_parse_from(["belfry-launcher", "conformance", "--devices", "1", "--filter", "x"]).unwrap();
        let Command::Conformance { opts, .. } = cli.command else { panic!("not conformance") };
        assert!(!opts.for_conformance().suite_layout, "devices chosen on the command line stay");
        assert!(matches!(Cli::try_parse_from(["belfry-launcher", "doctor"]).unwrap().command, Command::Doctor));
        assert!(Cli::try_parse_from(["belfry-launcher", "exec", "--filter", "x", "--", "ls"]).is_err());
    }

    #[test]
    fn exec_takes_the_command_after_the_separator() {
        let cli = Cli::try_parse_from(["belfry-launcher", "exec", "--no-module", "--", "ls", "-l", "/dev"]).unwrap();
        let Command::Exec { opts, command } = cli.command else { panic!("not exec") };
        assert!(opts.no_module);
        assert_eq!(command, vec!["ls", "-l", "/dev"]);
        assert!(Cli::try_parse_from(["belfry-launcher", "exec"]).is_err());
    }

    #[test]
    fn bad_flags_are_rejected() {
        for args in [
            &["belfry-launcher", "conformance", "--devices", "0"][..],
            &["belfry-launcher", "conformance", "--device-flags", "x=--y"],
            &["belfry-launcher", "conformance", "--accel", "hvf"],
            &["belfry-launcher", "shell", "--bless"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?} accepted");
        }
    }
}
