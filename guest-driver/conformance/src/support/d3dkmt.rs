//! The D3DKMT API's guest programs (`guest-driver/d3dkmt`: the examples and the rule checks,
//! compiled by the launcher against `libbelfry_d3dkmt.a`, in `/belfry/bin` beside the suite):
//! running one and checking its output.

use std::path::Path;

use crate::TestResult;

/// Runs `/belfry/bin/<binary> <args>` (beside the suite) and checks that it exits 0 and
/// printed each of `steps` at the start of a line.
pub(crate) fn program_passes(binary: &str, args: &[&str], steps: &[&str]) -> TestResult {
    let exe = std::env::current_exe()?;
    let program = exe.with_file_name(binary);
    ensure!(program.exists(), "{} is missing (cargo belfry conformance builds it)", program.display());
    let out = std::process::Command::new(&program).args(args).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{binary} {args:?} exited {}:\n{stdout}{stderr}", out.status);
    for step in steps {
        ensure!(
            stdout.lines().any(|l| l.starts_with(step)),
            "{binary} {args:?} printed no '{step}':\n{stdout}{stderr}"
        );
    }
    Ok(())
}

/// The adapter LUID's `LowPart` of the device file `path` (`N` of `/dev/belfry<N>`).
pub(crate) fn luid_of(path: &Path) -> Result<String, String> {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("belfry"))
        .filter(|n| n.parse::<u32>().is_ok())
        .map(str::to_string)
        .ok_or_else(|| format!("{} is not a /dev/belfry<N>", path.display()))
}

/// Runs rule check `check` of `belfry-d3dkmt-rules` on the device at `path`, expecting each of
/// `steps` and the check's final line.
pub(crate) fn rule_check_passes(path: &Path, check: &str, steps: &[&str]) -> TestResult {
    let luid = luid_of(path)?;
    let done = format!("{check}: all ok");
    let mut all: Vec<&str> = steps.to_vec();
    all.push(&done);
    program_passes("belfry-d3dkmt-rules", &[check, &luid], &all)
}
