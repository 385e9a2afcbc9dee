//! The D3DKMT-shaped C API (`guest-driver/d3dkmt`, no rule family): its two example programs,
//! written to the D3DKMT documentation and compiled by the provisioning root's gcc against
//! `libbelfry_d3dkmt.a` (in `/belfry/bin` beside the suite), run on this device and pass each
//! of their steps.

use std::path::Path;

use crate::{Test, TestResult};

/// Runs `/belfry/bin/<binary>` (beside the suite) and checks that it exits 0 and printed
/// each of `steps` at the start of a line.
fn example_passes(binary: &str, steps: &[&str]) -> TestResult {
    let exe = std::env::current_exe()?;
    let program = exe.with_file_name(binary);
    ensure!(program.exists(), "{} is missing (cargo belfry conformance builds it)", program.display());
    let out = std::process::Command::new(&program).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{binary} exited {}:\n{stdout}{stderr}", out.status);
    for step in steps {
        ensure!(stdout.lines().any(|l| l.starts_with(step)), "{binary} printed no '{step}':\n{stdout}{stderr}");
    }
    Ok(())
}

/// `d3dkmt_doorbell.c`: two user-mode hardware queues with doorbells on one context; a native
/// fence that queue A signals from the GPU and queue B waits on from the GPU before its
/// submission; CPU waits on the fence and on both queues' progress fences (queue B's
/// submission completes only after queue A's signal); a CPU signal releasing a second GPU
/// wait; a work-submission notification; everything destroyed.
fn d3dkmt_doorbell_example_passes(_path: &Path) -> TestResult {
    example_passes(
        "belfry-d3dkmt-doorbell",
        &[
            "ok adapter",
            "ok device",
            "ok doorbells",
            "ok native-fence",
            "ok submitted",
            "ok cpu-wait",
            "ok gpu-wait",
            "ok cpu-signal",
            "ok notify",
            "ok destroyed",
            "d3dkmt-doorbell: all ok",
        ],
    )
}

/// `d3dkmt_shared_fence.c`: a shareable native fence shared as a file descriptor with a forked
/// child, which opens it on its own adapter and device; the child waits on the CPU for the
/// parent's GPU signal and the parent on the CPU for the child's GPU signal.
fn d3dkmt_shared_fence_example_passes(_path: &Path) -> TestResult {
    example_passes(
        "belfry-d3dkmt-shared-fence",
        &[
            "ok shared",
            "ok child-open",
            "ok child-wait",
            "ok child-signal",
            "ok parent-signal",
            "ok parent-wait",
            "d3dkmt-shared-fence: all ok",
        ],
    )
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(d3dkmt_doorbell_example_passes, Default, []),
        test_entry!(d3dkmt_shared_fence_example_passes, Default, []),
    ]
}
