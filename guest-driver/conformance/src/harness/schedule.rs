//! Which waiting test may start next when tests run side by side: the first, in registry
//! order, whose [`Resources`] are compatible with every running test's, such that tests on the
//! same device still start in registry order and the exclusive tests run after every
//! device-only one, alone and in registry order.

use std::path::Path;

use crate::harness::resources::Resources;

/// A test waiting or running: what it holds and the device it runs on.
#[derive(Clone, Copy, Debug)]
pub struct Slot<'a> {
    /// What it holds.
    pub resources: Resources,
    /// Its device.
    pub device: &'a Path,
}

/// The index in `waiting` (registry order) of the test that may start now beside `running`,
/// or `None`: a device-only test whose device no running test holds, no exclusive test
/// running, and no earlier waiting test on the same device; an exclusive test only when
/// nothing runs, no device-only test waits and no earlier exclusive one does.
#[must_use]
pub fn next(waiting: &[Slot<'_>], running: &[Slot<'_>]) -> Option<usize> {
    waiting.iter().enumerate().find_map(|(i, t)| {
        let ready = match t.resources {
            Resources::Device => {
                running.iter().all(|r| t.resources.compatible(t.device, r.resources, r.device))
                    && !waiting[..i].iter().any(|w| w.resources == Resources::Device && w.device == t.device)
            }
            Resources::Exclusive => {
                running.is_empty()
                    && waiting.iter().all(|w| w.resources == Resources::Exclusive)
                    && waiting[..i].is_empty()
            }
        };
        ready.then_some(i)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(resources: Resources, device: &str) -> Slot<'_> {
        Slot { resources, device: Path::new(device) }
    }

    #[test]
    fn device_tests_on_other_devices_start_beside_each_other_in_order() {
        let waiting = [slot(Resources::Device, "d0"), slot(Resources::Device, "d0"), slot(Resources::Device, "d1")];
        assert_eq!(next(&waiting, &[]), Some(0));
        assert_eq!(next(&waiting[1..], &[slot(Resources::Device, "d0")]), Some(1), "d1 overtakes the busy d0");
        assert_eq!(next(&waiting[1..2], &[slot(Resources::Device, "d0")]), None, "d0 is busy");
    }

    #[test]
    fn exclusive_tests_wait_for_every_device_test_and_run_alone() {
        let waiting = [slot(Resources::Exclusive, "d0"), slot(Resources::Device, "d1")];
        assert_eq!(next(&waiting, &[]), Some(1), "the device-only test goes first");
        assert_eq!(next(&waiting[..1], &[slot(Resources::Device, "d1")]), None, "not beside a running test");
        assert_eq!(next(&waiting[..1], &[]), Some(0));
        let two = [slot(Resources::Exclusive, "d1"), slot(Resources::Exclusive, "d0")];
        assert_eq!(next(&two, &[]), Some(0), "exclusive tests keep registry order");
        assert_eq!(next(&[slot(Resources::Device, "d2")], &[slot(Resources::Exclusive, "d0")]), None);
    }
}
