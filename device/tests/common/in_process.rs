//! A device served in this process while it records an input log, with the recorder
//! `belfry-device --record` uses, on a thread that does what the device's main thread does —
//! reads the clock, starts the command processor, serves one connection, stops, ends the log —
//! so that a test-only hook of this process (`belfry_device::dma::test_hook`) runs inside it.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use belfry_device::config::DeviceConfig;
use belfry_device::device::Device;
use belfry_device::gpu::cmp::CommandProcessor;
use belfry_device::record::{self, Recorder};
use belfry_device::replay::{self, Outcome, Settings};
use belfry_device::trace::{Compression, Event, TraceLevel, TraceSettings, Tracer};
use belfry_device::vfio_user::server::serve_connection;

use super::gpu::Gpu;
use super::RawClient;

/// A default device recording into `log` (tracing into `trace` at the packets level, if
/// given, as `belfry-device --trace` does: tracing reads guest memory), with a client driving
/// it; the serving thread ends once the client is dropped and the log is finished.
pub fn record(log: &Path, trace: Option<&Path>) -> (Gpu<()>, JoinHandle<()>) {
    let config = DeviceConfig::default();
    let tracer = match trace {
        Some(path) => Tracer::with_file(&config, path, TraceSettings::default()).unwrap(),
        None => Tracer::new(&config.name),
    };
    let device = Arc::new(Device::new(config, Arc::new(tracer)).unwrap());
    let traced = device.tracer.enabled().then_some(TraceLevel::Packets);
    let json = record::config_json(&device.config, traced).unwrap();
    let recorder = Arc::new(Recorder::create(log, Compression::None, &json).unwrap());
    device.record_to(&recorder);
    let (client, server) = UnixStream::pair().unwrap();
    let serving = std::thread::Builder::new()
        .name("recording-device".into())
        .spawn(move || {
            device.tracer.emit(Event::Clock { gpu_ns: device.regs.timestamp() });
            let cmp = CommandProcessor::start(device.gpu.clone()).unwrap();
            serve_connection(&device, server);
            cmp.stop();
            device.tracer.sync();
            recorder.finish();
        })
        .unwrap();
    (Gpu::attach((), RawClient::over(client)), serving)
}

/// Replays `log` `times` times, each to the log's end with every record passed or released.
pub fn replays_to_its_end(log: &Path, times: u32) {
    for run in 1..=times {
        let settings =
            Settings { until: None, stall: Duration::from_secs(20), dump: true, trace: None, allow_other_build: false };
        let report = replay::run(log, &settings).unwrap();
        assert_eq!(report.outcome, Outcome::Finished, "replay {run}: {report:#?}");
        assert_eq!(report.passed + report.released, report.records, "replay {run}: {report:#?}");
    }
}
