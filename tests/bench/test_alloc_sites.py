"""bench/alloc_sites.py: stacks are attributed to the gateway's innermost frame, and the
recording without the requests is subtracted from the one with them."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import alloc_sites as a  # noqa: E402

WITH = "\n".join([
    "main;q_a2a_gateway::app::serve;q_a2a_gateway::metrics::record;metrics::Key::from_parts;"
    "alloc::alloc::alloc;malloc 300",
    "main;q_a2a_gateway::app::serve;hyper::proto::h1::decode;bytes::BytesMut::reserve;"
    "alloc::raw_vec::finish_grow;realloc 100",
    "main;tokio::runtime::spawn;alloc::alloc::alloc;malloc 50",
    "main;startup::config;serde_json::from_str;malloc 20",
    "not a stack line",
])
WITHOUT = "\n".join([
    "main;tokio::runtime::spawn;alloc::alloc::alloc;malloc 40",
    "main;startup::config;serde_json::from_str;malloc 20",
])


def test_stacks_are_read_outermost_first_with_their_counts():
    rows = a.parse(WITH)
    assert len(rows) == 4
    assert rows[0][0][0] == "main" and rows[0][1] == 300


def test_a_site_is_the_innermost_gateway_frame_and_two_callees():
    sites = a.by_site(a.parse(WITH))
    assert sites["q_a2a_gateway::metrics::record -> metrics::Key::from_parts -> "
                 "alloc::alloc::alloc"] == 300
    # No gateway frame: named by the frames above the allocator.
    assert sites["(no gateway frame) main -> tokio::runtime::spawn"] == 50


def test_inlined_frames_of_the_gateway_are_known_by_their_file_name():
    assert a.OWN.search("{async_fn#0} (card.rs)")
    assert a.OWN.search("q_a2a_gateway::metrics::record")
    # A name every crate has says nothing.
    assert not a.OWN.search("{closure#0} (mod.rs)")


def test_the_recording_without_requests_is_subtracted_per_request():
    total, sites = a.per_request(a.by_site(a.parse(WITH)), a.by_site(a.parse(WITHOUT)), 10)
    assert total == (470 - 60) / 10
    named = dict(sites)
    assert named["(no gateway frame) main -> tokio::runtime::spawn"] == 1.0
    # Startup is in both: it cancels out and is not listed.
    assert not any("startup" in name for name in named)
    assert sites[0][1] == 30.0
