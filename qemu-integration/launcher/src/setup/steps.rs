//! The build and provisioning steps as the user sees them: one line each with its time. By
//! default (quiet) the tools' own output (cargo, provision.sh, kbuild) goes to the run
//! directory's `build.log`; with `-v` it streams to the terminal as before.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::message::format_duration;

/// Where the tools of a step write their messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolOutput {
    /// The launcher's own standard error (`-v`).
    Terminal,
    /// Appended to this file (quiet).
    Log(PathBuf),
}

impl ToolOutput {
    /// A standard stream for a tool: the terminal, or the log file opened for appending (the
    /// terminal if it cannot be opened, so no message is lost).
    pub fn stdio(&self) -> Stdio {
        match self {
            ToolOutput::Terminal => Stdio::inherit(),
            ToolOutput::Log(path) => match append(path) {
                Ok(file) => Stdio::from(file),
                Err(_) => Stdio::inherit(),
            },
        }
    }

    /// Like [`Self::stdio`] for a tool whose notices must reach the terminal even when quiet:
    /// piped (then [`Self::copy_notices`] takes the pipe) when quiet.
    pub fn stdio_with_notices(&self) -> Stdio {
        match self {
            ToolOutput::Terminal => Stdio::inherit(),
            ToolOutput::Log(_) => Stdio::piped(),
        }
    }

    /// Copies a tool's piped output into the log, showing its notice lines (provision.sh's
    /// `[provision] notice: ...`: what it installs on the host) on the terminal too.
    pub fn copy_notices(&self, from: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<()> {
        let log = match self {
            ToolOutput::Log(path) => append(path).ok(),
            ToolOutput::Terminal => None,
        };
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            let mut log = log;
            for line in std::io::BufReader::new(from).lines() {
                let Ok(line) = line else { break };
                if let Some(notice) = notice(&line) {
                    eprintln!("\nbelfry: {notice}");
                }
                match log.as_mut() {
                    Some(file) => {
                        let _ = writeln!(file, "{line}");
                    }
                    None => eprintln!("{line}"),
                }
            }
        })
    }

    /// Where the messages are, for error messages.
    pub fn place(&self) -> String {
        match self {
            ToolOutput::Terminal => "above".into(),
            ToolOutput::Log(path) => format!("in {}", path.display()),
        }
    }
}

/// The text of a tool's notice line, if `line` is one.
pub fn notice(line: &str) -> Option<&str> {
    line.find("[provision] notice: ").map(|at| &line[at + "[provision] ".len()..])
}

fn append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// The steps of one run.
#[derive(Debug)]
pub struct Steps {
    /// Where the tools write.
    pub output: ToolOutput,
    /// Every finished step: its label and time (for `summary.txt`).
    pub done: Vec<(String, Duration)>,
}

impl Steps {
    /// Steps whose tools write to `log` unless `verbose`.
    pub fn new(verbose: bool, log: PathBuf) -> Self {
        let output = if verbose { ToolOutput::Terminal } else { ToolOutput::Log(log) };
        Self { output, done: Vec::new() }
    }

    /// Runs one step and prints `belfry: LABEL ... TIME` (or `... failed after TIME`). In
    /// quiet mode the label is printed first, so a long step (a cold kernel build) shows what
    /// it is waiting for; its line is completed when it ends.
    pub fn run<T, E>(&mut self, label: &str, step: impl FnOnce(&ToolOutput) -> Result<T, E>) -> Result<T, E> {
        let start = Instant::now();
        let quiet = self.output != ToolOutput::Terminal;
        if quiet {
            eprint!("belfry: {label} ... ");
            let _ = std::io::stderr().flush();
        } else {
            eprintln!("belfry: {label} ...");
        }
        let result = step(&self.output);
        let took = start.elapsed();
        let time = format_duration(took);
        match (&result, quiet) {
            (Ok(_), true) => eprintln!("{time}"),
            (Ok(_), false) => eprintln!("belfry: {label}: {time}"),
            (Err(_), true) => eprintln!("failed after {time}"),
            (Err(_), false) => eprintln!("belfry: {label}: failed after {time}"),
        }
        self.done.push((label.to_string(), took));
        result
    }

    /// The last `lines` lines of the tools' log (empty when they wrote to the terminal).
    pub fn log_tail(&self, lines: usize) -> Vec<String> {
        match &self.output {
            ToolOutput::Terminal => Vec::new(),
            ToolOutput::Log(path) => crate::run_dir::log_tail(path, lines),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_recognised() {
        assert_eq!(notice("[provision] notice: installing mmdebstrap"), Some("notice: installing mmdebstrap"));
        assert_eq!(notice("[provision] root: ready"), None);
    }

    #[test]
    fn copied_output_goes_to_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let out = ToolOutput::Log(dir.path().join("build.log"));
        let text = "[provision] kernel: ready\n[provision] notice: installing x\n";
        out.copy_notices(std::io::Cursor::new(text.as_bytes().to_vec())).join().unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("build.log")).unwrap(), text);
    }

    #[test]
    fn quiet_steps_send_tool_output_to_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("build.log");
        let mut steps = Steps::new(false, log.clone());
        let status = steps
            .run("step", |out| {
                std::process::Command::new("sh")
                    .args(["-c", "echo to-stdout; echo to-stderr >&2"])
                    .stdout(out.stdio())
                    .stderr(out.stdio())
                    .status()
            })
            .unwrap();
        assert!(status.success());
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("to-stdout") && text.contains("to-stderr"), "{text}");
        assert_eq!(steps.log_tail(1), vec!["to-stderr".to_string()]);
        assert_eq!(steps.done.len(), 1);
        assert_eq!(steps.output.place(), format!("in {}", log.display()));
        assert_eq!(Steps::new(true, log).log_tail(5), Vec::<String>::new());
    }
}
