//! `belfry-trace-schema`: the device trace's one definition. The device writes its records with
//! these types and `belfry-trace` reads them back with the same ones; `docs/TRACE.md` describes
//! them, and a test checks that it lists every field of every kind and every word of every
//! vocabulary.
//!
//! `event.rs` holds the records ([`Record`], [`Event`], the header, the format version and the
//! levels), `words.rs` the closed vocabularies of their fields (phases, deliveries, sources),
//! `examples.rs` one event of every kind for the tests, and `file.rs` how a trace file is
//! stored: JSON lines, gzip-compressed by default ([`file::Compression`]), read back whichever
//! the form ([`file::open`]). `input_log.rs` is the input log of a recorded run (`--record`):
//! every input that crossed the device's boundary, in binary records a replay reads back.

pub mod event;
pub mod examples;
pub mod file;
pub mod input_log;
pub mod words;

pub use event::{Event, Header, HeaderClock, Name, Record, TraceLevel, WalkStep, FORMAT_VERSION, KINDS};
