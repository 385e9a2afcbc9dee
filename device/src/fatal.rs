//! A device thread that panics ends the process.
//!
//! The device's threads (socket, command processor, engines, trace writer) share state; one that
//! dies leaves the others running a half-device — a dead engine keeps its queue marked running,
//! so `DESTROY_QUEUE` waits forever and the guest driver's mailbox times out with no cause.
//! The binary installs [`end_process_on_panic`] first thing: after the standard panic message
//! (thread, location, payload) it logs that the device cannot continue and exits with
//! [`EXIT_THREAD_PANICKED`], so the launcher or QEMU sees a dead device, not a wedged one.
//! The library itself installs nothing (unit tests keep the test harness's own handling).

/// The exit status of a process whose device thread panicked (`EX_SOFTWARE`).
pub const EXIT_THREAD_PANICKED: i32 = 70;

/// Installs the panic hook of the `belfry-device` binary (see the module documentation).
pub fn end_process_on_panic(device: &str) {
    let device = device.to_string();
    let standard = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        standard(info);
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed");
        log::error!(
            "{device}: device thread '{name}' panicked; the device cannot continue without it, ending the process \
             (exit status {EXIT_THREAD_PANICKED})"
        );
        std::process::exit(EXIT_THREAD_PANICKED);
    }));
}
