//! VIC-xx: Doorbell victimization (RULES.md § Doorbell victimization).

use std::path::Path;

use belfry_abi::uapi::DoorbellStatus;

use crate::support::fixture::Fixture;
use crate::support::work::{contended_load, expect_status, expect_u32, user_queue, write32};
use crate::support::WAIT;
use crate::{Test, TestResult};

/// proves: DB-03, VIC-01, VIC-02, VIC-03, VIC-04, RING-06 — with two physical doorbells,
/// creating a third doorbell takes none, connecting it victimizes the least recently used
/// queue (RETRY; its ring stays mapped and is written before it reconnects), which reconnects
/// by victimizing the next one, and every queue's own work runs.
fn least_recently_used_doorbell_is_victimized_and_reconnects(path: &Path) -> TestResult {
    let Fixture { dev: _dev, ctx, buf, q: mut q1 } = Fixture::new(path)?;
    let mut q2 = user_queue(&ctx)?;
    q1.connect_doorbell()?;
    q2.connect_doorbell()?;
    expect_status(&q1, DoorbellStatus::Connected, "q1 connected")?;
    expect_status(&q2, DoorbellStatus::Connected, "q2 connected")?;
    let mut q3 = user_queue(&ctx)?;
    expect_status(&q3, DoorbellStatus::DisconnectedRetry, "q3 after creation")?;
    expect_status(&q1, DoorbellStatus::Connected, "q1 after q3's creation")?;
    expect_status(&q2, DoorbellStatus::Connected, "q2 after q3's creation")?;
    q3.connect_doorbell()?;
    expect_status(&q3, DoorbellStatus::Connected, "q3 after connect")?;
    expect_status(&q1, DoorbellStatus::DisconnectedRetry, "q1 (least recently used) after q3's connect")?;
    expect_status(&q2, DoorbellStatus::Connected, "q2 after q3's connect")?;
    let v1 = write32(&mut q1, buf.va_at(0)?, 0x1111)?;
    ensure!(q1.stats().reconnects == 1, "q1: expected 1 reconnect, saw {}", q1.stats().reconnects);
    expect_status(&q1, DoorbellStatus::Connected, "q1 after its submission")?;
    expect_status(&q2, DoorbellStatus::DisconnectedRetry, "q2 (now least recently used) after q1 reconnected")?;
    expect_status(&q3, DoorbellStatus::Connected, "q3 after q1 reconnected")?;
    let v3 = write32(&mut q3, buf.va_at(8)?, 0x3333)?;
    let v2 = write32(&mut q2, buf.va_at(4)?, 0x2222)?;
    ensure!(q2.stats().reconnects == 1, "q2: expected 1 reconnect, saw {}", q2.stats().reconnects);
    q1.wait(v1, WAIT)?;
    q2.wait(v2, WAIT)?;
    q3.wait(v3, WAIT)?;
    expect_u32(&buf, 0, 0x1111, "q1's work")?;
    expect_u32(&buf, 4, 0x2222, "q2's work")?;
    expect_u32(&buf, 8, 0x3333, "q3's work")
}

/// proves: VIC-01, DB-14 — six queues of two processes on two physical doorbells all see
/// RETRY after their first connect (victimized by the others), reconnect, and all work runs.
fn six_queues_of_two_processes_on_two_doorbells_reconnect_and_complete(path: &Path) -> TestResult {
    contended_load(path, |i, stats, _| {
        ensure!(
            stats.reconnects >= 2,
            "queue {i}: {} reconnect(s): never victimized after its first connect",
            stats.reconnects
        );
        ensure!(stats.losses == 0, "queue {i}: lost {} time(s)", stats.losses);
        Ok(())
    })
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(
            least_recently_used_doorbell_is_victimized_and_reconnects,
            TwoDoorbells,
            ["DB-03", "VIC-01", "VIC-02", "VIC-03", "VIC-04", "RING-06"]
        ),
        test_entry!(
            six_queues_of_two_processes_on_two_doorbells_reconnect_and_complete,
            TwoDoorbells,
            ["VIC-01", "DB-14"]
        ),
    ]
}
