//! `belfry-trace`: reads the Belfry device's traces (`belfry-device --trace`) and the kernel
//! module's fence timeline, alone or as the run directory of `cargo belfry`, and shows them
//! decoded (`show`), summarised (`stats`) or as a Perfetto timeline (`perfetto`), and a
//! recorded run's input log checked and summarised (`inputs`) or replayed through the device
//! model (`replay`).
//! `docs/TRACE.md` describes the format and the Perfetto layout; `docs/DEBUGGING.md` walks
//! through debugging with it.

pub mod decode;
pub mod inputs;
pub mod lines;
pub mod model;
pub mod perfetto;
pub mod record;
pub mod replay;
pub mod run;
pub mod show;
pub mod stats;
pub mod timeline;
