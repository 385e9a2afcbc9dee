//! The device against a raw client that sends malformed and hostile vfio-user messages: each
//! is answered with an error carrying a meaningful errno, and the server keeps serving on the
//! same stream. Also: posted writes, disconnect, `--persist`, stale and live socket files.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::time::Duration;

use belfry_abi::{pci, regs};
use common::*;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX,
};

const EINVAL: u32 = libc::EINVAL as u32;

/// The server still answers correctly on this stream.
fn still_serving(c: &mut RawClient) {
    assert_eq!(c.read32(pci::REGS_BAR, regs::MAGIC::OFFSET), regs::MAGIC_VALUE);
}

fn connected(dev: &DeviceProcess) -> RawClient {
    let mut c = RawClient::connect(&dev.socket);
    c.negotiate();
    c
}

#[test]
fn commands_before_version_are_refused() {
    let dev = DeviceProcess::start(&[]);
    let mut c = RawClient::connect(&dev.socket);
    let r = c.request(9, &RawClient::region_access(0, 0, 4), &[]);
    assert_eq!((r.is_error(), r.error), (true, EINVAL));
    let r = c.request(1, &[9, 0, 0, 0], &[]);
    assert_eq!((r.is_error(), r.error), (true, libc::ENOTSUP as u32), "major version 9");
    let r = c.request(1, b"\0\0\x01\0not json\0", &[]);
    assert_eq!((r.is_error(), r.error), (true, EINVAL));
    let r = c.negotiate();
    let json = std::str::from_utf8(&r.payload[4..r.payload.len() - 1]).unwrap();
    let caps: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(caps["capabilities"]["max_data_xfer_size"], 1 << 20);
    still_serving(&mut c);
}

#[test]
fn short_and_non_command_headers_keep_the_stream_in_sync() {
    let dev = DeviceProcess::start(&[]);
    let mut c = connected(&dev);
    c.send_raw(&header(7, 9, 8, 0), &[]);
    let r = c.recv();
    assert_eq!((r.id, r.is_error(), r.error), (7, true, EINVAL));
    still_serving(&mut c);

    let mut reply_typed = header(9, 4, 32, 1);
    reply_typed.extend_from_slice(&[0u8; 16]);
    c.send_raw(&reply_typed, &[]);
    let r = c.recv();
    assert_eq!((r.id, r.is_error(), r.error), (9, true, EINVAL));
    still_serving(&mut c);
}

/// The client's side of the socket reaches end of stream (the server closed it) within `limit`.
fn closed_within(c: &mut RawClient, limit: Duration) -> bool {
    use std::io::Read;
    c.stream.set_read_timeout(Some(limit)).unwrap();
    let mut byte = [0u8; 1];
    matches!(c.stream.read(&mut byte), Ok(0))
}

#[test]
fn a_header_claiming_more_than_the_maximum_is_refused_and_the_connection_closed() {
    let dev = DeviceProcess::start(&["--persist"]);
    let mut c = connected(&dev);
    // Only the header: a server that drains the claimed body waits forever.
    let oversized = (1u32 << 20) + 4096 + 1;
    c.send_raw(&header(8, 10, oversized, 0), &[]);
    let r = c.recv();
    assert_eq!((r.id, r.is_error(), r.error), (8, true, libc::E2BIG as u32));
    assert!(closed_within(&mut c, Duration::from_secs(5)), "the server closes the connection");
    let mut next = connected(&dev);
    still_serving(&mut next);
}

#[test]
fn a_body_that_never_arrives_ends_the_connection() {
    let dev = DeviceProcess::start(&["--persist"]);
    let mut c = connected(&dev);
    // A REGION_WRITE claiming 64 bytes of body, of which 16 come.
    let mut msg = header(9, 10, 16 + 64, 0);
    msg.extend_from_slice(&[0u8; 16]);
    c.send_raw(&msg, &[]);
    let started = std::time::Instant::now();
    assert!(closed_within(&mut c, Duration::from_secs(15)), "the server gives up on the body");
    assert!(started.elapsed() < Duration::from_secs(15));
    let mut next = connected(&dev);
    still_serving(&mut next);
}

#[test]
fn unknown_unsupported_and_truncated_commands_get_errors() {
    let dev = DeviceProcess::start(&[]);
    let mut c = connected(&dev);
    for cmd in [0u16, 99, 0xffff] {
        let r = c.request(cmd, &[1, 2, 3], &[]);
        assert_eq!((r.is_error(), r.error), (true, libc::ENOTSUP as u32), "command {cmd}");
    }
    let r = c.request(6, &[0u8; 16], &[]);
    assert_eq!(r.error, libc::ENOTSUP as u32, "GET_REGION_IO_FDS");
    for cmd in [2u16, 3, 4, 5, 7, 8, 9, 10] {
        let r = c.request(cmd, &[0u8; 4], &[]);
        assert_eq!((r.is_error(), r.error), (true, EINVAL), "truncated payload for command {cmd}");
    }
    let r = c.request(4, &[4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]);
    assert_eq!(r.error, EINVAL, "argsz smaller than the struct");
    let r = c.request(4, &[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]);
    assert!(!r.is_error());
    assert_eq!(u32::from_le_bytes(r.payload[8..12].try_into().unwrap()), 9, "num_regions");
    still_serving(&mut c);
}

#[test]
fn accesses_past_a_region_and_to_absent_regions_fail() {
    let dev = DeviceProcess::start(&[]);
    let mut c = connected(&dev);
    assert_eq!(c.region_read(0, pci::REGS_BAR_SIZE - 2, 4), Err(EINVAL));
    assert_eq!(c.region_read(0, u64::MAX - 1, 4), Err(EINVAL));
    assert_eq!(c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, 4094, &[0; 4]), Err(EINVAL));
    assert_eq!(c.region_read(1, 0, 4), Err(EINVAL), "BAR1 does not exist");
    assert_eq!(c.region_read(42, 0, 4), Err(EINVAL));
    assert_eq!(c.region_read(0, 0, 0), Err(EINVAL), "zero-length access");
    assert_eq!(c.region_read(0, 0, u32::MAX), Err(libc::E2BIG as u32), "huge count");
    let mut p = RawClient::region_access(0x28, 0, 8);
    p.extend_from_slice(&[1, 2, 3, 4]);
    assert_eq!(c.request(10, &p, &[]).error, EINVAL, "count larger than the data sent");
    let mut info = 32u32.to_le_bytes().to_vec();
    info.extend_from_slice(&[0u8; 4]);
    info.extend_from_slice(&77u32.to_le_bytes());
    info.extend_from_slice(&[0u8; 20]);
    assert_eq!(c.request(5, &info, &[]).error, EINVAL, "region index 77");
    still_serving(&mut c);
}

#[test]
fn bad_irq_requests_fail() {
    let dev = DeviceProcess::start(&[]);
    let mut c = connected(&dev);
    let mut info = 16u32.to_le_bytes().to_vec();
    info.extend_from_slice(&0u32.to_le_bytes());
    info.extend_from_slice(&9u32.to_le_bytes());
    info.extend_from_slice(&0u32.to_le_bytes());
    assert_eq!(c.request(7, &info, &[]).error, EINVAL, "irq index 9");
    let set = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    let efd = eventfd();
    let r = c.set_irqs(VFIO_PCI_MSI_IRQ_INDEX, set, 0, 1, &[efd.as_raw_fd()]);
    assert_eq!(r.error, EINVAL, "no MSI capability");
    assert_eq!(c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, set, 3, 2, &[]).error, EINVAL, "past the last vector");
    assert_eq!(c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, set, 0, u32::MAX, &[]).error, EINVAL, "huge count");
    let two = [efd.as_raw_fd(), efd.as_raw_fd()];
    assert_eq!(c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, set, 0, 1, &two).error, EINVAL, "fd count mismatch");
    assert_eq!(c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, 0xff, 0, 1, &[]).error, EINVAL, "bad flags");
    assert!(!c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, set, 0, 1, &[efd.as_raw_fd()]).is_error());
    still_serving(&mut c);
}

#[test]
fn interrupt_fds_other_than_eventfds_are_refused() {
    let dev = DeviceProcess::start(&[]);
    let mut c = connected(&dev);
    let set = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    let (read_end, write_end) = pipe();
    let r = c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, set, 0, 1, &[write_end.as_raw_fd()]);
    assert_eq!((r.is_error(), r.error), (true, EINVAL), "a pipe");
    let file = tempfile::tempfile().unwrap();
    let r = c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, set, 0, 1, &[file.as_raw_fd()]);
    assert_eq!((r.is_error(), r.error), (true, EINVAL), "a regular file");
    let efd = eventfd();
    let r = c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, set, 0, 2, &[efd.as_raw_fd(), write_end.as_raw_fd()]);
    assert_eq!((r.is_error(), r.error), (true, EINVAL), "an eventfd and a pipe");
    assert!(!c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, set, 0, 1, &[efd.as_raw_fd()]).is_error(), "an eventfd");
    dev.wait_trace("refusal", |r| r["event"] == "message" && r["errno"] == libc::EINVAL);
    drop(read_end);
    still_serving(&mut c);
}

#[test]
fn a_saturated_blocking_eventfd_does_not_block_the_device() {
    let dev = DeviceProcess::start(&[]);
    let mut c = connected(&dev);
    // A blocking eventfd one below its maximum count: the next write of 1 would block.
    let efd = vmm_sys_util::eventfd::EventFd::new(0).unwrap();
    efd.write(u64::MAX - 1).unwrap();
    let set = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    assert!(!c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, set, 0, 1, &[efd.as_raw_fd()]).is_error());
    // Loopback: trigger vector 0 now, from the socket thread.
    let fire = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
    let r = c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, fire, 0, 1, &[]);
    assert!(!r.is_error(), "the trigger is answered");
    still_serving(&mut c);
}

/// A DMA_UNMAP payload.
fn dma_unmap(flags: u32, address: u64, size: u64) -> Vec<u8> {
    let mut unmap = 24u32.to_le_bytes().to_vec();
    unmap.extend_from_slice(&flags.to_le_bytes());
    unmap.extend_from_slice(&address.to_le_bytes());
    unmap.extend_from_slice(&size.to_le_bytes());
    unmap
}

#[test]
fn bad_dma_maps_fail_and_fds_on_other_commands_are_refused() {
    let dev = DeviceProcess::start(&[]);
    let mut c = connected(&dev);
    // Without an fd (QEMU's ROMs): accepted as unreachable, and it takes its range.
    assert!(!c.dma_map(0xc0000, 0x20000, &[]).is_error(), "no fd");
    let ram = memfd(0x20000);
    assert_eq!(
        c.dma_map(0xd0000, 0x1000, &[ram.as_raw_fd()]).error,
        libc::EEXIST as u32,
        "overlaps the fd-less region"
    );
    assert!(!c.dma_map(0x10000, 0x20000, &[ram.as_raw_fd()]).is_error());
    assert_eq!(c.dma_map(0x20000, 0x10000, &[ram.as_raw_fd()]).error, libc::EEXIST as u32, "overlap");
    assert_eq!(c.dma_map(0x80000, 0, &[ram.as_raw_fd()]).error, EINVAL, "zero size");
    assert_eq!(c.dma_map(u64::MAX - 0xfff, 0x2000, &[ram.as_raw_fd()]).error, EINVAL, "wraps");
    assert_eq!(c.dma_map(0x100000, 0x100000, &[ram.as_raw_fd()]).error, EINVAL, "past the end of the fd");
    // Unmaps are of ranges (QEMU's IOMMU notifiers unmap whole address-space ranges): one with
    // nothing mapped in it is no error; one cutting a window off a page boundary is refused.
    assert!(!c.request(3, &dma_unmap(0, 0x90000, 0x1000), &[]).is_error(), "unmap of nothing");
    assert_eq!(c.request(3, &dma_unmap(0, 0x10800, 0x1000), &[]).error, EINVAL, "cut off a page boundary");
    assert!(!c.request(3, &dma_unmap(0, 0xc0000, 0x20000), &[]).is_error(), "unmap of the fd-less region");
    assert_eq!(c.request(3, &dma_unmap(1 << 1, 0x10000, 0x1000), &[]).error, EINVAL, "all, with a range");
    assert_eq!(c.request(3, &dma_unmap(1 << 0, 0x10000, 0x1000), &[]).error, libc::ENOTSUP as u32, "dirty bitmap");
    assert!(!c.request(3, &dma_unmap(1 << 1, 0, 0), &[]).is_error(), "unmap of all");
    assert!(!c.dma_map(0x10000, 0x20000, &[ram.as_raw_fd()]).is_error(), "all was unmapped");
    let r = c.request(9, &RawClient::region_access(0, 0, 4), &[ram.as_raw_fd()]);
    assert_eq!(r.error, EINVAL, "REGION_READ with an fd");
    still_serving(&mut c);
}

#[test]
fn dma_maps_need_a_regular_file_sealed_against_shrinking() {
    let dev = DeviceProcess::start(&[]);
    let mut c = connected(&dev);
    let unsealed = unsealed_memfd(0x10000);
    let r = c.dma_map(0x10000, 0x10000, &[unsealed.as_raw_fd()]);
    assert_eq!((r.is_error(), r.error), (true, EINVAL), "a memfd that can shrink");
    let (read_end, _write_end) = pipe();
    let r = c.dma_map(0x10000, 0x10000, &[read_end.as_raw_fd()]);
    assert_eq!((r.is_error(), r.error), (true, EINVAL), "a pipe");
    let sealed = memfd(0x10000);
    assert!(!c.dma_map(0x10000, 0x10000, &[sealed.as_raw_fd()]).is_error(), "sealed: accepted");
    still_serving(&mut c);
    // The operator's opt-out for file backends that cannot be sealed.
    let dev = DeviceProcess::start(&["--allow-unsealed-ram"]);
    let mut c = connected(&dev);
    assert!(!c.dma_map(0x10000, 0x10000, &[unsealed.as_raw_fd()]).is_error(), "--allow-unsealed-ram");
    let r = c.dma_map(0x20000, 0x10000, &[read_end.as_raw_fd()]);
    assert_eq!((r.is_error(), r.error), (true, EINVAL), "a pipe is never guest RAM");
}

#[test]
fn posted_writes_get_no_reply_but_take_effect() {
    let dev = DeviceProcess::start(&[]);
    let mut c = connected(&dev);
    let mut msg = header(50, 10, 16 + 20, 1 << 4);
    msg.extend_from_slice(&RawClient::region_access(u64::from(regs::SCRATCH::OFFSET), 0, 4));
    msg.extend_from_slice(&0x55aa_55aau32.to_le_bytes());
    c.send_raw(&msg, &[]);
    assert_eq!(c.read32(0, regs::SCRATCH::OFFSET), 0x55aa_55aa, "the next reply is the read's");
    let rec = dev.wait_trace("posted write", |r| r["event"] == "message" && r["id"] == 50);
    assert_eq!(rec["posted"], true);
}

#[test]
fn disconnect_ends_the_process_unless_persist() {
    let mut dev = DeviceProcess::start(&[]);
    drop(connected(&dev));
    let status = dev.wait_exit(Duration::from_secs(10)).expect("device exits after the client leaves");
    assert!(status.success());
    assert!(!dev.socket.exists(), "socket file removed");

    let mut dev = DeviceProcess::start(&["--persist"]);
    let mut c = connected(&dev);
    c.write32(0, regs::SCRATCH::OFFSET, 9);
    drop(c);
    let mut c = connected(&dev);
    assert_eq!(c.read32(0, regs::SCRATCH::OFFSET), 0, "the next client sees a reset device");
    assert!(dev.wait_exit(Duration::from_millis(100)).is_none());
}

#[test]
fn stale_socket_files_are_replaced_and_live_ones_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    drop(UnixListener::bind(&path).unwrap()); // leaves a stale socket file behind
    let bin = env!("CARGO_BIN_EXE_belfry-device");
    let mut first = std::process::Command::new(bin).arg("--socket-path").arg(&path).spawn().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&path).is_err() {
        assert!(std::time::Instant::now() < deadline, "server never listened on the stale path");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The probe connection above counts as a client; start a persistent one to test "in use".
    let _ = first.wait();
    let mut live = std::process::Command::new(bin).arg("--socket-path").arg(&path).arg("--persist").spawn().unwrap();
    while std::os::unix::net::UnixStream::connect(&path).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = std::process::Command::new(bin).arg("--socket-path").arg(&path).output().unwrap();
    assert!(!out.status.success(), "a second server on a live socket fails");
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use"));
    let _ = live.kill();
    let _ = live.wait();
    let regular = dir.path().join("file");
    std::fs::write(&regular, b"x").unwrap();
    let out = std::process::Command::new(bin).arg("--socket-path").arg(&regular).output().unwrap();
    assert!(!out.status.success());
    assert_eq!(std::fs::read(&regular).unwrap(), b"x", "a regular file is never replaced");
}

#[test]
fn bad_flags_are_refused_with_a_clear_message() {
    let bin = env!("CARGO_BIN_EXE_belfry-device");
    for args in [
        &["--socket-path", "/tmp/x", "--doorbells", "0"][..],
        &["--socket-path", "/tmp/x", "--vram-size", "3M"],
        &["--socket-path", "/tmp/x", "--msix-vectors", "1000"],
        &["--socket-path", "/tmp/x", "--inject", "nonsense"],
        &["--fd", "99999"],
    ] {
        let out = std::process::Command::new(bin).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?} says why");
    }
}
