//! `docs/TRACE.md` against the schema: its table has a row for every kind, at the kind's level,
//! naming every field the kind writes and every word of its vocabularies, so the document
//! cannot fall behind the format.

use std::path::Path;

use belfry_trace_schema::examples::every_kind;
use belfry_trace_schema::words::{
    BufferPhase, ConnectionState, Delivery, DmaOp, FenceSource, MailboxPhase, Passed, ResetSource, ScheduleWhy,
};
use belfry_trace_schema::{Event, TraceLevel};

fn trace_md() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/TRACE.md");
    std::fs::read_to_string(path).expect("docs/TRACE.md exists")
}

/// The rows of the table of kinds: (kinds cell, level cell, fields cell).
fn rows(doc: &str) -> Vec<(String, String, String)> {
    doc.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.strip_prefix('|')?.strip_suffix('|')?.split('|').map(str::trim).collect();
            match cells[..] {
                [kinds, level, fields] if kinds.starts_with('`') => {
                    Some((kinds.to_string(), level.to_string(), fields.to_string()))
                }
                _ => None,
            }
        })
        .collect()
}

/// The level cell a kind's row must have: the tracer's own records are written at every level.
fn level_word(event: &Event) -> &'static str {
    match event {
        Event::Header(_) | Event::LimitReached { .. } | Event::Dropped { .. } => "every",
        _ => event.level().name(),
    }
}

/// The words of each kind's vocabularies.
fn words_of(event: &Event) -> Vec<&'static str> {
    fn names<T: Copy>(all: &[T], name: fn(T) -> &'static str) -> Vec<&'static str> {
        all.iter().map(|&w| name(w)).collect()
    }
    match event {
        Event::Connection { .. } => names(ConnectionState::ALL, ConnectionState::name),
        Event::Mailbox { .. } => names(MailboxPhase::ALL, MailboxPhase::name),
        Event::CommandBuffer { .. } => names(BufferPhase::ALL, BufferPhase::name),
        Event::Interrupt { .. } => names(Delivery::ALL, Delivery::name),
        Event::Dma { .. } => names(DmaOp::ALL, DmaOp::name),
        Event::Reset { .. } => names(ResetSource::ALL, ResetSource::name),
        Event::FenceDecision { .. } => names(FenceSource::ALL, FenceSource::name),
        Event::Schedule { .. } => {
            let mut words = names(ScheduleWhy::ALL, ScheduleWhy::name);
            words.extend(names(Passed::ALL, Passed::name));
            words
        }
        Event::Header(_) => names(&TraceLevel::ALL, TraceLevel::name),
        _ => Vec::new(),
    }
}

#[test]
fn every_field_of_every_kind_is_in_the_table() {
    let doc = trace_md();
    let rows = rows(&doc);
    assert!(rows.len() > 10, "the table of kinds was not found in docs/TRACE.md");
    let mut missing = Vec::new();
    for event in every_kind() {
        let kind = event.kind();
        let Some((_, level, fields)) = rows.iter().find(|(kinds, _, _)| kinds.contains(&format!("`{kind}`"))) else {
            missing.push(format!("{kind}: no row"));
            continue;
        };
        if level != level_word(&event) {
            missing.push(format!("{kind}: level {level:?}, the schema says {:?}", level_word(&event)));
        }
        let json = serde_json::to_value(&event).unwrap();
        let keys = json.as_object().unwrap().keys().filter(|k| *k != "event");
        for key in keys {
            if !fields.contains(&format!("`{key}`")) {
                missing.push(format!("{kind}: field `{key}`"));
            }
        }
        for word in words_of(&event) {
            if !fields.contains(&format!("`{word}`")) {
                missing.push(format!("{kind}: word `{word}`"));
            }
        }
    }
    assert!(missing.is_empty(), "docs/TRACE.md's table of kinds lacks:\n  {}", missing.join("\n  "));
}
