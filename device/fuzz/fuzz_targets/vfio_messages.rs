//! Fuzz target: arbitrary bytes as a vfio-user stream from a client, served by a real device.
//!
//! The input is written to one end of a socket pair (after a valid VERSION message so the
//! fuzzer reaches every command) and the server runs on the other end until end of stream.
//! Whatever the bytes, the server must neither panic nor hang.
#![no_main]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use belfry_device::config::DeviceConfig;
use belfry_device::device::Device;
use belfry_device::gpu::cmp::CommandProcessor;
use belfry_device::trace::Tracer;
use belfry_device::vfio_user::serve_connection;
use libfuzzer_sys::fuzz_target;

mod common;
use common::version_message;

fuzz_target!(|data: &[u8]| {
    let config = DeviceConfig::from_flags(["--vram-size", "1M", "--doorbells", "4"]).unwrap();
    let device = Arc::new(Device::new(config, Arc::new(Tracer::new("fuzz"))).unwrap());
    let cmp = CommandProcessor::start(device.gpu.clone()).unwrap();
    let (mut client, server) = UnixStream::pair().unwrap();
    let input = [version_message(), data.to_vec()].concat();
    let writer = std::thread::spawn(move || {
        let _ = client.write_all(&input);
        let _ = client.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = client.read_to_end(&mut sink);
    });
    serve_connection(&device, server);
    writer.join().unwrap();
    cmp.stop();
});
