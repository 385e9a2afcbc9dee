//! `belfry-trace-schema`: the device trace's one definition. The device writes its records with
//! these types and `belfry-trace` reads them back with the same ones; `docs/TRACE.md` describes
//! them, and a test checks that it lists every field of every kind.
//!
//! `file.rs` is how a trace file is stored: JSON lines, gzip-compressed by default
//! ([`file::Compression`]), read back whichever the form ([`file::open`]).

pub mod file;
