//! One test in a process of its own, so that tests can run side by side without sharing a
//! process (its identity and share of each device, its signal handlers, files and limits):
//! the suite's own binary started with [`RUN_ONE`] runs the named test on the named device
//! ([`crate::harness::runner::run_in_this_process`]), prints its line and writes its [`Record`] to a file; the runner
//! ([`start`], [`Started::finish`]) keeps the test's output (stdout and stderr together, in a
//! file rather than a pipe so that a process the test left behind cannot hold the runner up)
//! to print it whole when the test's turn comes.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::record::{Outcome, Record};
use crate::harness::registry::Test;
use crate::harness::tasks;

/// The flag that runs one test (by exact name) instead of the suite.
pub const RUN_ONE: &str = "--run-one";
/// The flag naming the file a [`RUN_ONE`] run writes its record to.
pub const RECORD: &str = "--record";
/// The flag naming the iteration a [`RUN_ONE`] run belongs to.
pub const ITERATION: &str = "--iteration";

/// A test started in its own process.
pub struct Started {
    child: Child,
    output: PathBuf,
    record: PathBuf,
    test: Test,
    device: PathBuf,
    iteration: Option<u32>,
}

/// Starts `test` on `device` in a new process of the suite's binary, in a process group of its
/// own (with whatever it starts); `dir` holds its output and record files (named by `index`).
///
/// # Errors
/// The binary cannot be found or started, or the files cannot be created.
pub fn start(test: &Test, device: &Path, iteration: Option<u32>, dir: &Path, index: usize) -> std::io::Result<Started> {
    let output = dir.join(format!("{index}.out"));
    let record = dir.join(format!("{index}.json"));
    let out = std::fs::File::create(&output)?;
    let err = out.try_clone()?;
    let mut command = Command::new(std::env::current_exe()?);
    command.arg(RUN_ONE).arg(test.name).arg("--device").arg(device).arg(RECORD).arg(&record);
    if let Some(k) = iteration {
        command.arg(ITERATION).arg(k.to_string());
    }
    let child = command.stdin(Stdio::null()).stdout(out).stderr(err).process_group(0).spawn()?;
    Ok(Started { child, output, record, test: *test, device: device.to_path_buf(), iteration })
}

impl Started {
    /// Waits for the test's process: its output and its record (a FAIL record if the process
    /// ended without writing one).
    #[must_use]
    pub fn finish(self) -> (String, Record) {
        self.finish_within(None)
    }

    /// [`Self::finish`], but a test still running after `limit` has its process group killed
    /// and fails with where its tasks waited (their kernel functions and stacks).
    #[must_use]
    pub fn finish_within(mut self, limit: Option<Duration>) -> (String, Record) {
        let mut overran = None;
        if let Some(limit) = limit {
            let deadline = Instant::now() + limit;
            while matches!(self.child.try_wait(), Ok(None)) {
                if Instant::now() >= deadline {
                    let pid = libc::pid_t::try_from(self.child.id()).unwrap_or(libc::pid_t::MAX);
                    overran = Some(tasks::where_threads_wait(pid));
                    tasks::kill_group(pid);
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let status = self.child.wait();
        let output = std::fs::read_to_string(&self.output).unwrap_or_default();
        let written = std::fs::read_to_string(&self.record).ok().and_then(|s| serde_json::from_str::<Record>(&s).ok());
        let _ = std::fs::remove_file(&self.output);
        let _ = std::fs::remove_file(&self.record);
        if let Some(record) = written {
            return (output, record);
        }
        let reason = match (overran, status) {
            (Some(waits), _) => format!(
                "still running after {} s, killed; its tasks waited in: {waits}",
                limit.map_or(0, |l| l.as_secs())
            ),
            (None, Ok(s)) => format!("its process ended ({s}) without a result"),
            (None, Err(e)) => format!("waiting for its process: {e}"),
        };
        let line = format!("FAIL {}: {reason}\n", self.test.name);
        let record = Record {
            name: self.test.name.into(),
            outcome: Outcome::Fail,
            ids: self.test.ids.iter().map(|s| (*s).to_string()).collect(),
            reason: Some(reason),
            kernel_lacks: false,
            device: Some(self.device.display().to_string()),
            seconds: 0.0,
            iteration: self.iteration,
        };
        (output + &line, record)
    }
}
