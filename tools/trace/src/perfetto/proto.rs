//! The few Perfetto trace messages this tool writes, declared by hand for `prost` (no code
//! generation, no `protoc`). Field numbers and types are those of Perfetto's
//! `protos/perfetto/trace/` (`trace.proto`, `trace_packet.proto`, `track_event/*.proto`);
//! the test in `tests/perfetto.rs` decodes the output with the official generated classes.
#![allow(missing_docs)]

/// `perfetto.protos.Trace`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Trace {
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

/// `perfetto.protos.TracePacket` (a subset; `track_event` and `track_descriptor` are members of
/// the `data` oneof, and only one is ever set).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    #[prost(message, optional, tag = "53")]
    pub gpu_render_stage_event: Option<GpuRenderStageEvent>,
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
}

/// `perfetto.protos.InternedData` (the GPU members): what the render-stage events of the
/// sequence name by iid.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedData {
    #[prost(message, repeated, tag = "23")]
    pub graphics_contexts: Vec<InternedGraphicsContext>,
    #[prost(message, repeated, tag = "24")]
    pub gpu_specifications: Vec<InternedGpuRenderStageSpecification>,
}

/// `perfetto.protos.InternedGraphicsContext`: a GPU context, by iid.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedGraphicsContext {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(int32, optional, tag = "2")]
    pub pid: Option<i32>,
    /// `InternedGraphicsContext.Api` (`UNDEFINED` = 0: Belfry's packets are no public API's).
    #[prost(int32, optional, tag = "3")]
    pub api: Option<i32>,
}

/// `perfetto.protos.InternedGpuRenderStageSpecification`: a hardware queue or a stage, by iid
/// (both kinds share the iid space of `gpu_specifications`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedGpuRenderStageSpecification {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub description: Option<String>,
    /// `RenderStageCategory`: `OTHER` = 0, `GRAPHICS` = 1, `COMPUTE` = 2.
    #[prost(int32, optional, tag = "4")]
    pub category: Option<i32>,
}

/// `RenderStageCategory.OTHER`.
pub const STAGE_OTHER: i32 = 0;
/// `RenderStageCategory.COMPUTE`.
pub const STAGE_COMPUTE: i32 = 2;

/// `perfetto.protos.GpuRenderStageEvent`: one piece of GPU work on a hardware queue, with its
/// duration; the packet's timestamp is its start.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GpuRenderStageEvent {
    #[prost(uint64, optional, tag = "1")]
    pub event_id: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    pub duration: Option<u64>,
    #[prost(uint64, optional, tag = "5")]
    pub context: Option<u64>,
    #[prost(message, repeated, tag = "6")]
    pub extra_data: Vec<GpuExtraData>,
    #[prost(uint32, optional, tag = "10")]
    pub submission_id: Option<u32>,
    #[prost(int32, optional, tag = "11")]
    pub gpu_id: Option<i32>,
    #[prost(uint64, optional, tag = "12")]
    pub command_buffer_handle: Option<u64>,
    #[prost(uint64, optional, tag = "13")]
    pub hw_queue_iid: Option<u64>,
    #[prost(uint64, optional, tag = "14")]
    pub stage_iid: Option<u64>,
    #[prost(string, optional, tag = "17")]
    pub name: Option<String>,
}

/// `GpuRenderStageEvent.ExtraData`: a name and a value, shown as the slice's arguments.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GpuExtraData {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

impl GpuExtraData {
    /// An argument `name` = `value`.
    pub fn new(name: &str, value: impl Into<String>) -> Self {
        GpuExtraData { name: Some(name.into()), value: Some(value.into()) }
    }
}

/// `TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED`.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;

/// `perfetto.protos.TrackDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
    #[prost(string, optional, tag = "14")]
    pub description: Option<String>,
    #[prost(int32, optional, tag = "11")]
    pub child_ordering: Option<i32>,
    #[prost(int32, optional, tag = "12")]
    pub sibling_order_rank: Option<i32>,
}

/// `TrackDescriptor.ChildTracksOrdering.EXPLICIT`.
pub const CHILD_ORDERING_EXPLICIT: i32 = 3;

/// `perfetto.protos.ProcessDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

/// `perfetto.protos.CounterDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CounterDescriptor {
    #[prost(string, optional, tag = "6")]
    pub unit_name: Option<String>,
}

/// `perfetto.protos.TrackEvent`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
}

impl TrackEvent {
    /// An event of `kind` on `track` named `name` (no name when empty), with arguments and flows.
    pub fn message(kind: EventType, track: u64, name: &str, args: Vec<DebugAnnotation>, flows: Vec<u64>) -> Self {
        TrackEvent {
            debug_annotations: args,
            r#type: Some(kind as i32),
            track_uuid: Some(track),
            categories: vec!["belfry".into()],
            name: (!name.is_empty()).then(|| name.to_string()),
            flow_ids: flows,
            ..Default::default()
        }
    }
}

/// `TrackEvent.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum EventType {
    /// `TYPE_SLICE_BEGIN`.
    SliceBegin = 1,
    /// `TYPE_SLICE_END`.
    SliceEnd = 2,
    /// `TYPE_INSTANT`.
    Instant = 3,
    /// `TYPE_COUNTER`.
    Counter = 4,
}

/// `perfetto.protos.DebugAnnotation` (name and a string, unsigned or signed value).
#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
    #[prost(int64, optional, tag = "4")]
    pub int_value: Option<i64>,
    #[prost(string, optional, tag = "6")]
    pub string_value: Option<String>,
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
}

impl DebugAnnotation {
    /// A string argument.
    pub fn string(name: &str, value: impl Into<String>) -> Self {
        DebugAnnotation { name: Some(name.into()), string_value: Some(value.into()), ..Default::default() }
    }

    /// An unsigned argument.
    pub fn uint(name: &str, value: u64) -> Self {
        DebugAnnotation { name: Some(name.into()), uint_value: Some(value), ..Default::default() }
    }
}
