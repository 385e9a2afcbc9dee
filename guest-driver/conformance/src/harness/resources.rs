//! What a test holds while it runs, so that the runner can run tests side by side
//! ([`Resources`]): every test is [`Resources::Exclusive`] (it runs alone, with the module and
//! the machine quiet) unless it is named in [`DEVICE_ONLY`], the tests that touch nothing but
//! the one device they are given and their own files and processes.
//!
//! A test is left out of [`DEVICE_ONLY`] (so exclusive) when it does any of: unbind, rebind,
//! reload or remove the module, or set a module parameter; lose, stall or reprobe a device;
//! allow runtime suspend (D3) or put the guest to sleep; use a second device (cross-adapter
//! fences, peer signals) or every attached device; read the kernel log, the taint flags,
//! `/proc` or `/sys`, or the guest's free memory; count interrupts or interrupt-path records
//! (`IRQ_DEBUG`, fence interrupts), the module's fence timeline or its global fence log;
//! assert on elapsed time (deadlines, timeouts, CPU waits that must sleep); run the ioctl
//! fuzzer, an exec'd copy of the suite or the D3DKMT programs; run on a device started with
//! test-only faults; or count against one user's share of a device. A new test is exclusive
//! until it is shown to be none of these and named here.

/// What a test holds while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resources {
    /// Only the device it runs on (its device-wide counters included): it may run beside tests
    /// on other devices, never beside another test on the same device.
    Device,
    /// The module and the machine: it runs alone.
    Exclusive,
}

impl Resources {
    /// Whether a test holding `self` on `device` may run beside one holding `other` on
    /// `other_device`.
    #[must_use]
    pub fn compatible(self, device: &std::path::Path, other: Resources, other_device: &std::path::Path) -> bool {
        self == Resources::Device && other == Resources::Device && device != other_device
    }
}

/// What the test named `name` holds: [`Resources::Device`] if [`DEVICE_ONLY`] names it, else
/// [`Resources::Exclusive`].
#[must_use]
pub fn declared(name: &str) -> Resources {
    if DEVICE_ONLY.contains(&name) {
        Resources::Device
    } else {
        Resources::Exclusive
    }
}

/// The tests that touch only their own device, files and processes (by suite file).
pub const DEVICE_ONLY: &[&str] = &[
    // db.rs
    "doorbell_is_created_retry_and_connect_makes_it_connected",
    "a_ring_before_the_connect_runs_nothing_until_the_connect",
    "submission_while_disconnected_reconnects_and_runs",
    "context_fault_aborts_its_doorbells",
    "kernel_mode_queue_runs_beside_user_mode_queue",
    "kernel_mode_submit_is_refused_on_a_user_mode_queue",
    "doorbell_reads_connected_notify_while_its_context_is_suspended",
    "disconnect_doorbell_on_request_publishes_its_status_and_holds_work_until_reconnect",
    // vic.rs
    "least_recently_used_doorbell_is_victimized_and_reconnects",
    // sub.rs
    "progress_fence_values_increase_and_are_reached",
    "user_mode_submission_makes_no_kernel_call",
    "copy_fill_and_compute_write_the_expected_data",
    "progress_fence_releases_another_queues_gpu_wait",
    // ring.rs
    "ring_allocations_are_held_by_the_queue_and_freed_only_by_the_library",
    "queue_creation_needs_both_ring_allocations_named",
    // ctx.rs
    "suspended_context_keeps_its_doorbell_and_runs_work_after_resume",
    "kernel_mode_submit_to_a_suspended_context_runs_after_resume",
    "victimized_suspended_queue_reconnects_and_runs_after_resume",
    // term.rs
    "exiting_with_queued_work_releases_every_object",
    "killed_process_releases_every_object",
    "the_release_path_is_judged_on_the_process_that_opened_the_file",
    // isolation.rs
    "another_process_cannot_reach_this_process_objects",
    // fen.rs
    "cpu_wait_wakes_on_a_gpu_signal",
    "current_value_mapping_is_read_only",
    "cpu_signal_releases_a_gpu_wait",
    "monitored_fence_cpu_wait_wakes_on_a_gpu_signal",
    "monitored_fence_cpu_signal_is_visible_at_once_and_releases_a_waiter",
    "monitored_fence_mapping_is_read_only",
    "eventfd_waits_refuse_bad_arguments_and_are_bounded",
    "pollable_wait_becomes_ready_on_a_gpu_signal",
    "pollable_wait_on_a_monitored_fence_and_its_drop_on_destroy",
    "pollable_wait_is_released_by_a_per_queue_record",
    "monitored_gpu_wait_is_released_by_another_queue_s_gpu_signal",
    "monitored_gpu_signal_is_a_packet_with_no_kernel_call_of_its_own",
    "software_signal_packet_writes_the_fence_from_the_cpu_when_it_runs",
    "native_gpu_wait_of_a_kernel_mode_queue_waits_on_the_gpu",
    "queued_fence_operations_refuse_bad_fences_and_unbounded_holds",
    "monitored_cpu_signal_and_wait_wrap_across_the_32_bit_boundary",
    "monitored_gpu_signal_and_wait_wrap_across_the_32_bit_boundary",
    "monitored_values_outside_the_32_bit_window_are_refused",
    // nf.rs
    "intra_gpu_fence_refuses_the_cpu_and_works_gpu_to_gpu",
    "fence_values_are_packed_at_the_stride_unless_shareable",
    "one_destroy_call_destroys_every_kind_of_fence",
    "create_fence_refuses_an_unknown_type_and_the_type_fixes_the_storage",
    "monitored_value_is_a_separate_64_bit_location_no_process_can_map",
    "intra_gpu_fence_is_a_kernel_object_debug_tools_see",
    "current_value_is_never_seen_torn",
    "user_mode_queues_refuse_monitored_fence_waits",
    "optimized_default_fence_keeps_monitored_value_in_vram_unless_shareable",
    // mv.rs
    "gpu_signals_without_a_waiter_raise_no_interrupt",
    "monitored_value_follows_the_pending_waits",
    "eventfd_waits_on_several_fences_complete_in_one_batched_update",
    "optimized_default_fence_serves_every_cpu_and_gpu_pairing",
    // irq.rs
    "pollable_wait_is_released_by_a_null_record_scan",
    // forged.rs
    "a_forged_ring_read_index_does_not_end_a_split_submission_early",
    // umd.rs
    "dropped_pollable_waits_are_withdrawn",
    "cpu_signals_never_move_a_fence_backwards",
    "gpu_signals_the_library_knows_to_be_backwards_are_refused",
    "pollable_wait_on_a_destroyed_fence_reports_it_gone",
    "exported_fence_fd_is_never_ready_to_poll",
    // eng.rs
    "an_idle_engine_goes_to_f1_and_a_submission_brings_it_back",
    // umd_wait.rs
    "reset_status_reports_a_guilty_context_after_its_fault",
    "a_fence_event_sees_a_software_signal_when_it_runs",
    // umd_sync.rs
    "sync_file_export_follows_a_kernel_mode_queue",
    // umd_foreign.rs
    "queues_refuse_fences_of_other_contexts_and_files",
    // split.rs
    "a_buffer_through_three_vram_allocations_runs_split_with_paging_between_parts",
    "another_context_never_runs_between_the_parts_but_paging_does",
    "the_same_buffer_runs_unsplit_with_enough_vram",
    "two_processes_over_subscribing_vram_both_complete",
    "a_buffer_whose_single_part_cannot_fit_is_refused_and_changes_nothing",
    "an_allocation_vram_cannot_hold_is_used_from_its_fallback",
    "decreasing_split_offsets_are_refused",
    "moves_under_running_user_mode_work_lose_no_store",
    // transport.rs
    "a_sleeping_waiters_wake_up_is_stamped_in_order",
];

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn every_name_listed_is_a_test_once() {
        let names: Vec<&str> = crate::registry().iter().map(|t| t.name).collect();
        for (i, name) in DEVICE_ONLY.iter().enumerate() {
            assert!(names.contains(name), "{name} is listed but no test has that name");
            assert!(!DEVICE_ONLY[..i].contains(name), "{name} is listed twice");
        }
    }

    #[test]
    fn only_device_tests_on_different_devices_run_side_by_side() {
        let (a, b) = (Path::new("/dev/belfry0"), Path::new("/dev/belfry1"));
        assert!(Resources::Device.compatible(a, Resources::Device, b));
        assert!(!Resources::Device.compatible(a, Resources::Device, a));
        assert!(!Resources::Exclusive.compatible(a, Resources::Device, b));
        assert!(!Resources::Device.compatible(a, Resources::Exclusive, b));
    }

    #[test]
    fn an_unlisted_test_is_exclusive() {
        assert_eq!(declared("a_test_nobody_listed"), Resources::Exclusive);
        assert_eq!(declared(DEVICE_ONLY[0]), Resources::Device);
    }
}
