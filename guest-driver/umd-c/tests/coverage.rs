//! The C API covers the Rust API: every public call of `belfry-umd` (read from its source by
//! `belfry-apicheck`) has a row in [`COVERAGE`], naming its C counterparts (which must be
//! exported by this crate) or the reason it has none. A call added to the library without a row,
//! a row naming a call that is gone, or a C function that does not exist fails the test, so the
//! two APIs cannot drift apart silently.

use std::path::Path;

/// What covers a Rust call in C.
enum C {
    /// These C functions do what it does.
    Calls(&'static [&'static str]),
    /// Why C has no counterpart.
    Reason(&'static str),
}
use C::{Calls, Reason};

const DEBUG: &str = "the module's debug interface (suite and benches, DEBUGGING.md), not a user API";
const BUILDER: &str = "a Rust builder of the queue descriptor: belfry_queue_create_ex takes its fields as arguments";
const HANDLE: &str =
    "the module's per-file handle, meaningful only to raw ioctls, which C programs do not make through this library";
const SUBMITTER: &str = "the submission sequence as pure logic over QueueOps, for the library's own host tests";
const RAW_PACKET: &str = "a packet with a raw fence VA and fence-log slot, for the device's tests: C names the fence (belfry_cmdbuf_signal_fence, belfry_cmdbuf_wait_fence), which fills both in";
const VERBOSE: &str = "verbose fence logging is a tracing tool's switch and its watch (belfry-timeline --verbose); a C program's submissions follow the switch as the library read it when the device was opened";
const RUST_ONLY: &str = "Rust value plumbing with no C meaning (errors are negative errnos and belfry_last_error in C)";
const DOORBELL: &str = "doorbell state is driven by belfry_queue_submit (reconnect, notify, re-create); manual control is for the suite's doorbell tests";
const DOORBELL_PAGES: &str = "the program's own doorbell and status addresses are the D3DKMT API's (D3DKMTCreateDoorbell); this API rings through belfry_queue_submit";

/// Every public call of `belfry-umd` and what covers it in C.
const COVERAGE: &[(&str, C)] = &[
    ("Device::open", Calls(&["belfry_device_open"])),
    ("Device::open_index", Calls(&["belfry_device_open_index"])),
    ("Device::enumerate", Calls(&["belfry_device_enumerate"])),
    ("Device::caps", Calls(&["belfry_device_query"])),
    ("Device::path", Reason("the caller opened it by that path (belfry_device_open) or got it from belfry_device_enumerate")),
    ("Device::create_context", Calls(&["belfry_context_create"])),
    ("Device::interrupt_counts", Reason(DEBUG)),
    ("Device::debug_stats", Reason(DEBUG)),
    ("Device::recovery_debug", Reason(DEBUG)),
    ("Device::power_debug", Reason(DEBUG)),
    ("Device::device_power", Reason(DEBUG)),
    ("Device::fence_debug", Reason(DEBUG)),
    ("Device::irq_debug", Reason(DEBUG)),
    ("Device::irq_moderation", Reason(DEBUG)),
    ("Device::mailbox_timing", Reason(DEBUG)),
    ("Device::wake_path", Reason(DEBUG)),
    ("Device::verbose_logging", Reason(VERBOSE)),
    ("Device::set_verbose_logging", Reason(VERBOSE)),
    ("Device::watch_verbose_logging", Reason(VERBOSE)),
    ("VerboseLogWatch::wait_change", Reason(VERBOSE)),
    ("Device::mm_stats", Reason(DEBUG)),
    ("Caps::bits", Calls(&["belfry_device_query"])),
    ("Caps::test_injections", Reason("test-only device faults, for the suite")),
    ("Caps::user_mode_submission", Calls(&["belfry_device_query"])),
    ("Caps::vram_size", Calls(&["belfry_device_query"])),
    ("Caps::doorbell_count", Calls(&["belfry_device_query"])),
    ("Caps::engine_count", Calls(&["belfry_device_query"])),
    ("Caps::native_gpu_fence_supported", Calls(&["belfry_device_query"])),
    ("Caps::native_fence_caps_version", Calls(&["belfry_device_query"])),
    ("Caps::map_to_gpu_system_process", Calls(&["belfry_device_query"])),
    ("Caps::sync_file_export", Calls(&["belfry_device_query"])),
    ("Caps::os_optimized_default_fence", Calls(&["belfry_device_query"])),
    ("Caps::os_intra_gpu_fence", Calls(&["belfry_device_query"])),
    ("Caps::fence_segments", Calls(&["belfry_device_query"])),
    ("Context::handle", Reason(HANDLE)),
    ("Context::caps", Calls(&["belfry_device_query"])),
    ("Context::alloc", Calls(&["belfry_alloc_create"])),
    ("Context::create_queue", Calls(&["belfry_queue_create", "belfry_queue_create_ex"])),
    ("Context::create_fence", Calls(&["belfry_fence_create"])),
    ("Context::import_fence", Calls(&["belfry_fence_import"])),
    ("Context::reset_status", Calls(&["belfry_context_reset_status", "belfry_context_fault"])),
    ("Context::suspend", Reason("the module's scheduler control (SUSPEND_CONTEXT), for the suite's scheduling tests")),
    ("Context::resume", Reason("the module's scheduler control (RESUME_CONTEXT), for the suite's scheduling tests")),
    ("ResetStatus::is_lost", Calls(&["belfry_context_reset_status"])),
    ("Allocation::handle", Reason(HANDLE)),
    ("Allocation::gpu_va", Calls(&["belfry_alloc_gpu_va"])),
    ("Allocation::size", Calls(&["belfry_alloc_size"])),
    ("Allocation::va_at", Reason("belfry_alloc_gpu_va plus the offset; the bounds are the caller's (belfry_alloc_size)")),
    ("Allocation::read", Calls(&["belfry_alloc_read"])),
    ("Allocation::write", Calls(&["belfry_alloc_write"])),
    ("Allocation::fill", Reason("belfry_alloc_write of the caller's bytes, or belfry_cmdbuf_fill on the GPU")),
    ("Allocation::read_u32", Calls(&["belfry_alloc_read_u32"])),
    ("Allocation::read_u64", Calls(&["belfry_alloc_read"])),
    ("Allocation::write_u32", Calls(&["belfry_alloc_write_u32"])),
    ("Allocation::write_u64", Calls(&["belfry_alloc_write"])),
    ("CommandBuffer::new", Calls(&["belfry_cmdbuf_create"])),
    ("CommandBuffer::as_bytes", Reason("the bytes go to the queue through belfry_queue_submit")),
    ("CommandBuffer::len", Calls(&["belfry_cmdbuf_size"])),
    ("CommandBuffer::is_empty", Calls(&["belfry_cmdbuf_size"])),
    ("CommandBuffer::clear", Calls(&["belfry_cmdbuf_clear"])),
    ("CommandBuffer::log_sites", Reason("the fence-log bookkeeping belfry_queue_submit does")),
    ("CommandBuffer::write32", Calls(&["belfry_cmdbuf_write32"])),
    ("CommandBuffer::write64", Calls(&["belfry_cmdbuf_write64"])),
    ("CommandBuffer::timestamp", Calls(&["belfry_cmdbuf_timestamp"])),
    ("CommandBuffer::fence_signal", Reason(RAW_PACKET)),
    ("CommandBuffer::logged_signal", Reason(RAW_PACKET)),
    ("CommandBuffer::logged_wait", Reason(RAW_PACKET)),
    ("CommandBuffer::fence_wait", Reason(RAW_PACKET)),
    ("CommandBuffer::monitored_signal", Calls(&["belfry_cmdbuf_signal_fence"])),
    ("CommandBuffer::signal_fence", Calls(&["belfry_cmdbuf_signal_fence"])),
    ("CommandBuffer::wait_fence", Calls(&["belfry_cmdbuf_wait_fence"])),
    ("CommandBuffer::notify", Calls(&["belfry_cmdbuf_notify"])),
    ("CommandBuffer::copy", Calls(&["belfry_cmdbuf_copy"])),
    ("CommandBuffer::bind_slot", Calls(&["belfry_cmdbuf_bind_slot"])),
    ("CommandBuffer::slot_copy", Calls(&["belfry_cmdbuf_slot_copy"])),
    ("CommandBuffer::fill", Calls(&["belfry_cmdbuf_fill"])),
    ("CommandBuffer::compute", Calls(&["belfry_cmdbuf_compute"])),
    ("CommandBuffer::jump", Calls(&["belfry_cmdbuf_jump"])),
    ("CommandBuffer::nop", Calls(&["belfry_cmdbuf_nop"])),
    ("cmdbuf::decode", Reason("a decoder of command-buffer bytes for tools and tests; C builds buffers and does not read them back")),
    ("Fence::export", Calls(&["belfry_fence_export"])),
    ("Fence::export_sync_file", Calls(&["belfry_fence_export_sync_file"])),
    ("Fence::event", Calls(&["belfry_fence_event_create"])),
    ("Fence::notify", Calls(&["belfry_fence_notify"])),
    ("Fence::cancel_notify", Calls(&["belfry_fence_cancel_notify"])),
    ("Fence::handle", Reason(HANDLE)),
    ("Fence::kind", Calls(&["belfry_fence_kind"])),
    ("Fence::gpu_va", Calls(&["belfry_fence_gpu_va"])),
    ("Fence::page_offset", Reason("where the value sits in its mapped page: an implementation detail of belfry_fence_value")),
    ("Fence::value", Calls(&["belfry_fence_value"])),
    ("Fence::cpu_address", Reason("a raw pointer into the read-only fence page; belfry_fence_value reads it safely")),
    ("Fence::signal", Calls(&["belfry_fence_signal"])),
    ("Fence::wait", Calls(&["belfry_fence_wait"])),
    ("Fence::wait_until", Calls(&["belfry_fence_wait"])),
    ("Fence::point", Calls(&["belfry_wait_fences"])),
    ("Fence::log_handle", Reason(DEBUG)),
    ("Fence::xad_info", Reason(DEBUG)),
    ("Fence::info", Reason(DEBUG)),
    ("FenceEvent::is_ready", Calls(&["belfry_fence_event_wait"])),
    ("FenceEvent::wait", Calls(&["belfry_fence_event_wait"])),
    ("FenceEvent::wait_until", Calls(&["belfry_fence_event_wait"])),
    ("FenceEvent::value", Reason("the value the caller passed to belfry_fence_event_create")),
    ("FenceEvent::take", Calls(&["belfry_fence_event_take"])),
    ("Queue::submit", Calls(&["belfry_queue_submit"])),
    ("Queue::wait", Calls(&["belfry_queue_wait"])),
    ("Queue::progress_point", Reason("belfry_queue_wait waits for one queue's progress; a wait mixing fences and queues is Rust's wait_any/wait_all only")),
    ("Queue::completed", Calls(&["belfry_queue_completed"])),
    ("Queue::last_submitted", Calls(&["belfry_queue_last_submitted"])),
    ("Queue::mode", Reason("the mode the caller created the queue with")),
    ("Queue::handle", Reason(HANDLE)),
    ("Queue::doorbell_handle", Reason(HANDLE)),
    ("Queue::progress_fence_va", Reason(DEBUG)),
    ("Queue::progress_log_handle", Reason(DEBUG)),
    ("Queue::ring_again", Reason(DOORBELL)),
    ("Queue::doorbell_status", Reason(DOORBELL)),
    ("Queue::connect_doorbell", Reason(DOORBELL)),
    ("Queue::disconnect_doorbell", Reason(DOORBELL)),
    ("Queue::notify_work_submission", Reason(DOORBELL)),
    ("Queue::map_doorbell_pages", Reason(DOORBELL_PAGES)),
    ("DoorbellPages::doorbell_address", Reason(DOORBELL_PAGES)),
    ("DoorbellPages::status_address", Reason(DOORBELL_PAGES)),
    ("Queue::read_index", Reason(DEBUG)),
    ("Queue::wait_fence", Calls(&["belfry_queue_wait_fence"])),
    ("Queue::signal_fence", Calls(&["belfry_queue_signal_fence"])),
    ("Queue::software_signal", Calls(&["belfry_queue_signal_fence"])),
    ("Queue::stats", Reason(DEBUG)),
    ("QueueDesc::with_engine", Reason(BUILDER)),
    ("QueueDesc::with_priority", Reason(BUILDER)),
    ("QueueDesc::with_mode", Reason(BUILDER)),
    ("QueueDesc::with_ring_entries", Reason(BUILDER)),
    ("QueueDesc::with_slot_bytes", Reason(BUILDER)),
    ("QueueDesc::with_retry_limit", Reason("the library's default reconnect budget; C programs see -EAGAIN when it runs out")),
    ("QueueDesc::with_slot_timeout", Reason("a wait for a ring slot is bounded by the library's default; C programs see -ETIMEDOUT")),
    ("QueueDesc::with_ring_in_vram", Calls(&["belfry_queue_create_ex"])),
    ("VideoAllocation::new", Calls(&["belfry_vidmem_create"])),
    ("VideoAllocation::handle", Reason(HANDLE)),
    ("VideoAllocation::gpu_va", Calls(&["belfry_vidmem_gpu_va"])),
    ("VideoAllocation::size", Calls(&["belfry_vidmem_size"])),
    ("VideoAllocation::read", Calls(&["belfry_vidmem_read"])),
    ("VideoAllocation::write", Calls(&["belfry_vidmem_write"])),
    ("SplitBuffer::new", Calls(&["belfry_split_create"])),
    ("SplitBuffer::bind", Calls(&["belfry_split_bind"])),
    ("SplitBuffer::bind_all", Calls(&["belfry_split_bind"])),
    ("SplitBuffer::unbind", Calls(&["belfry_split_unbind"])),
    ("SplitBuffer::finish", Calls(&["belfry_split_finish"])),
    ("SplitBuffer::slot_copy", Calls(&["belfry_split_slot_copy"])),
    ("SplitBuffer::commands", Calls(&["belfry_split_write32"])),
    ("SplitBuffer::as_bytes", Reason("the bytes go to the queue through belfry_split_submit")),
    ("SplitBuffer::allocations", Reason("the lists go to the queue through belfry_split_submit")),
    ("SplitBuffer::patches", Reason("the lists go to the queue through belfry_split_submit")),
    ("SplitQueue::new", Calls(&["belfry_split_queue_create"])),
    ("SplitQueue::handle", Reason(HANDLE)),
    ("SplitQueue::submit", Calls(&["belfry_split_submit"])),
    ("SplitQueue::submit_with", Reason("a split submission with a forged patch list, for the module's tests")),
    ("Deadline::after", Calls(&["belfry_monotonic_ns"])),
    ("Deadline::at_monotonic_ns", Reason("C deadlines are CLOCK_MONOTONIC nanoseconds already")),
    ("Deadline::as_monotonic_ns", Reason("C deadlines are CLOCK_MONOTONIC nanoseconds already")),
    ("Deadline::is_forever", Reason("a comparison with BELFRY_DEADLINE_FOREVER")),
    ("Deadline::remaining", Reason("the deadline minus belfry_monotonic_ns()")),
    ("wait::wait_any", Calls(&["belfry_wait_fences"])),
    ("wait::wait_all", Calls(&["belfry_wait_fences"])),
    ("WaitPoint::value", Reason("the value the caller put in belfry_wait_fences' values array")),
    ("Error::errno", Reason(RUST_ONLY)),
    ("Error::ioctl_name", Calls(&["belfry_last_error"])),
    ("errno::name", Calls(&["belfry_last_error"])),
    ("InterruptCounts::from_stats", Reason(DEBUG)),
    ("Timeline::new", Reason(DEBUG)),
    ("Timeline::from_now", Reason(DEBUG)),
    ("Timeline::read", Reason(DEBUG)),
    ("Timeline::lost", Reason(DEBUG)),
    ("LogCursor::new", Reason(SUBMITTER)),
    ("LogCursor::next", Reason(SUBMITTER)),
    ("LogCursor::take", Reason(SUBMITTER)),
    ("LogCursor::skip", Reason(SUBMITTER)),
    ("LogCursor::assign", Reason(SUBMITTER)),
    ("LogCursor::assign_verbose", Reason(SUBMITTER)),
    ("Submitter::new", Reason(SUBMITTER)),
    ("Submitter::last_value", Reason(SUBMITTER)),
    ("Submitter::stats", Reason(SUBMITTER)),
    ("Submitter::completed", Reason(SUBMITTER)),
    ("Submitter::submit", Reason(SUBMITTER)),
    ("Submitter::submit_logged", Reason(SUBMITTER)),
    ("Submitter::wait", Reason(SUBMITTER)),
];

/// The `fn` items of the crate at `dir` (relative to this crate), as `Type::method` or
/// `module::function` (generic parameters of the type left out).
fn calls_of(dir: &str) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join("src");
    belfry_apicheck::public_items(&src)
        .unwrap()
        .into_iter()
        .filter(|i| i.line.starts_with("fn "))
        .map(|i| match i.path.split_once(" <") {
            Some((ty, rest)) => format!("{ty}{}", &rest[rest.find(">::").map_or(rest.len(), |p| p + 1)..]),
            None => i.path,
        })
        .collect()
}

#[test]
fn every_public_rust_call_has_a_c_counterpart_or_a_reason() {
    let rust = calls_of("../umd");
    let c: Vec<String> = calls_of(".").into_iter().filter_map(|p| p.rsplit("::").next().map(str::to_string)).collect();
    assert!(rust.len() > 100 && c.len() > 40, "read {} Rust calls and {} C functions", rust.len(), c.len());
    let mut problems = Vec::new();
    for call in &rust {
        if !COVERAGE.iter().any(|(name, _)| name == call) {
            problems.push(format!("{call}: no row in COVERAGE (add its C counterpart, or the reason it has none)"));
        }
    }
    for (name, cover) in COVERAGE {
        if !rust.iter().any(|r| r == name) {
            problems.push(format!("{name}: a row in COVERAGE, but belfry-umd has no such public call"));
        }
        match cover {
            Calls(names) => {
                for f in *names {
                    if !c.iter().any(|e| e == f) {
                        problems.push(format!("{name}: its C counterpart {f} is not a function of belfry-umd-c"));
                    }
                }
            }
            Reason(why) => assert!(!why.is_empty(), "{name}: an empty reason"),
        }
    }
    assert!(problems.is_empty(), "the C API and the Rust API drifted apart:\n  {}", problems.join("\n  "));
}
