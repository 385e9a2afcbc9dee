"""Decodes a Perfetto trace written by `belfry-trace perfetto` with the official generated
classes (perfetto_trace_pb2 from the `perfetto` package) and checks its structure: every event
on a declared track, process tracks for the device and the module, engine and queue tracks,
balanced, non-overlapping slices per track, counter tracks with counter values only, and flows that
join at least FLOW_MIN events; and Perfetto's GPU view: render-stage events whose hardware
queue, stage and context are interned on their sequence after it was cleared, with a duration,
not overlapping on their hardware queue. TRACE may be gzip (as Perfetto's UI opens it). Prints
a summary; exits non-zero with the reason on failure.

usage: check_perfetto.py TRACE EXPECT_JSON
EXPECT_JSON: {"processes": [...names...], "tracks": [...names...], "slices": [...names...],
              "flow_min_events": N, "flows_min": N, "gpu_queues": [...names...], "gpu_min": N}
"""
import gzip
import json
import sys
from collections import defaultdict

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

TE = pb.TrackEvent


def fail(msg):
    print(f"check_perfetto: {msg}")
    sys.exit(1)


def main():
    path, expect = sys.argv[1], json.loads(sys.argv[2])
    trace = pb.Trace()
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    trace.ParseFromString(data)
    tracks, names, processes, counters = {}, {}, set(), set()
    events = []
    specs, contexts, cleared = {}, set(), set()
    gpu = defaultdict(list)  # hardware queue name -> [(start, end, stage name)]
    for p in trace.packet:
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            cleared.add(p.trusted_packet_sequence_id)
        if p.HasField("interned_data"):
            if p.trusted_packet_sequence_id not in cleared:
                fail("interned data on a sequence whose incremental state was never cleared")
            for sp in p.interned_data.gpu_specifications:
                specs[sp.iid] = sp
            contexts.update(c.iid for c in p.interned_data.graphics_contexts)
        if p.HasField("track_descriptor"):
            t = p.track_descriptor
            if t.uuid in tracks:
                fail(f"track {t.uuid:#x} declared twice")
            tracks[t.uuid] = t
            if t.HasField("process"):
                processes.add(t.process.process_name)
            else:
                names[t.name] = t.uuid
            if t.HasField("counter"):
                counters.add(t.uuid)
        elif p.HasField("track_event"):
            if not p.HasField("timestamp"):
                fail("track event without timestamp")
            events.append((p.timestamp, p.track_event))
        elif p.HasField("gpu_render_stage_event"):
            g = p.gpu_render_stage_event
            if not p.HasField("timestamp") or not g.HasField("duration"):
                fail(f"render-stage event without timestamp or duration: {g}")
            for what, iid in (("hardware queue", g.hw_queue_iid), ("stage", g.stage_iid)):
                if iid not in specs:
                    fail(f"render-stage event {g.name!r} names {what} iid {iid} that is not interned before it")
            if g.HasField("context") and g.context not in contexts:
                fail(f"render-stage event {g.name!r} names context {g.context} that is not interned")
            gpu[specs[g.hw_queue_iid].name].append((p.timestamp, p.timestamp + g.duration, specs[g.stage_iid].name))
        elif not p.HasField("interned_data"):
            fail(f"unexpected packet {p}")
    for t in tracks.values():
        if t.HasField("parent_uuid") and t.parent_uuid not in tracks:
            fail(f"track {t.name!r} has an undeclared parent")
    for want in expect["processes"]:
        if not any(want in p for p in processes):
            fail(f"no process track named like {want!r}: {sorted(processes)}")
    for want in expect["tracks"]:
        if not any(want in n for n in names):
            fail(f"no track named like {want!r}: {sorted(names)}")

    stacks = defaultdict(list)
    slices = defaultdict(int)
    flows = defaultdict(list)
    last_ts = 0
    for ts, e in events:
        if ts < last_ts:
            fail("events are not in timestamp order")
        last_ts = ts
        if e.track_uuid not in tracks:
            fail(f"event {e.name!r} on undeclared track {e.track_uuid:#x}")
        if (e.type == TE.TYPE_COUNTER) != (e.track_uuid in counters):
            fail(f"event {e.name!r} of type {e.type} on track {tracks[e.track_uuid].name!r}")
        if e.type == TE.TYPE_SLICE_BEGIN:
            if stacks[e.track_uuid]:
                # belfry-trace never nests slices: a begin inside an open slice is an overlap,
                # which would end the wrong slice.
                fail(f"slice {e.name!r} begins at {ts} inside {stacks[e.track_uuid][-1]} on {tracks[e.track_uuid].name!r}")
            stacks[e.track_uuid].append((ts, e.name))
            slices[e.name.split(" ")[0]] += 1
        elif e.type == TE.TYPE_SLICE_END:
            if not stacks[e.track_uuid]:
                fail(f"slice end without begin on {tracks[e.track_uuid].name!r} at {ts}")
            begin, _ = stacks[e.track_uuid].pop()
            if ts < begin:
                fail("slice ends before it begins")
        for f in list(e.flow_ids) + list(e.terminating_flow_ids):
            flows[f].append((ts, e.name))
    open_slices = {tracks[u].name: s for u, s in stacks.items() if s}
    if open_slices:
        fail(f"unterminated slices: {open_slices}")
    for want in expect["slices"]:
        if slices[want] == 0:
            fail(f"no slice named {want!r}: {dict(slices)}")
    lone = [f for f, evs in flows.items() if len(evs) < 2]
    if lone:
        fail(f"{len(lone)} flow(s) with a single event")
    long_flows = [evs for evs in flows.values() if len(evs) >= expect["flow_min_events"]]
    if len(long_flows) < expect["flows_min"]:
        fail(f"{len(long_flows)} flow(s) of {expect['flow_min_events']}+ events, expected {expect['flows_min']}: {list(flows.values())}")
    for queue, work in gpu.items():
        work.sort()
        for (a0, a1, _), (b0, _, _) in zip(work, work[1:]):
            if b0 < a1:
                fail(f"GPU work overlaps on hardware queue {queue!r}: {a0}..{a1} and {b0}")
    for want in expect.get("gpu_queues", []):
        if not any(want in q for q in gpu):
            fail(f"no GPU hardware queue named like {want!r}: {sorted(gpu)}")
    gpu_events = sum(len(w) for w in gpu.values())
    if gpu_events < expect.get("gpu_min", 0):
        fail(f"{gpu_events} render-stage event(s), expected {expect['gpu_min']}")
    print(
        f"check_perfetto: ok: {len(tracks)} tracks, {len(events)} events, {gpu_events} GPU render stages "
        f"on {len(gpu)} hardware queues, "
        f"{sum(slices.values())} slices, {len(flows)} flows; longest: {max(flows.values(), key=len, default=[])}"
    )


main()
