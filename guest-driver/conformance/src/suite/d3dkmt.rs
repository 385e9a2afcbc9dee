//! The D3DKMT-shaped C API (`guest-driver/d3dkmt`, no rule family): its two example programs,
//! written to the D3DKMT documentation and compiled by the provisioning root's gcc against
//! `libbelfry_d3dkmt.a` (in `/belfry/bin` beside the suite), run on this device and pass each
//! of their steps. The rule checks through the same API (`rules/d3dkmt_rules.c`) are tests of
//! their rule families, named `d3dkmt_*` (`--filter d3dkmt` runs them all).

use std::path::Path;

use crate::support::d3dkmt::program_passes;
use crate::{Test, TestResult};

/// `d3dkmt_doorbell.c`: two user-mode hardware queues with doorbells on one context; a native
/// fence that queue A signals from the GPU and queue B waits on from the GPU before its
/// submission; CPU waits on the fence and on both queues' progress fences (queue B's
/// submission completes only after queue A's signal); a CPU signal releasing a second GPU
/// wait; a work-submission notification; everything destroyed.
fn d3dkmt_doorbell_example_passes(_path: &Path) -> TestResult {
    program_passes(
        "belfry-d3dkmt-doorbell",
        &[],
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

/// `d3dkmt_shared_fence.c`: a shared monitored fence shared as a file descriptor with a forked
/// child, which opens it on its own adapter and device (`D3DKMTOpenSyncObjectFromNtHandle2`);
/// the child waits on the CPU for the parent's GPU signal (of the parent's context) and the
/// parent on the CPU for the child's GPU signal (of the child's context).
fn d3dkmt_shared_fence_example_passes(_path: &Path) -> TestResult {
    program_passes(
        "belfry-d3dkmt-shared-fence",
        &[],
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
