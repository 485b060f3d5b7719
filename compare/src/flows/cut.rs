//! Cutting the reassembled streams of one connection into parts for the pairing table
//! ([`Pending`](crate::pending::Pending)): HTTP/1.x messages by order, with their answer times
//! (see the parent module's doc), HTTP/2 messages by stream id through the connection's
//! [`Reader`](crate::h2::Reader)s, and a connection that is not HTTP/1.x whole, as bytes. The
//! table, the reassembly of segments and the bounds are [`super`]'s; what is cut here leaves the
//! stream's buffer (its `start` moves past it), so each byte is handed on at most once.

use std::collections::VecDeque;
use std::time::Instant;

use common::seq::SeqNum;

use crate::comparator::Reply;
use crate::h2::{answer_as_http1, request_as_http1};
use crate::http::{message_len, parse_request_head, Framing, HttpError};
use crate::pending::Part;

use super::{Conn, FlowConfig, FlowCounts, H2Conn, Stream};

/// The longest message whose end is skipped to (2^62 bytes): a `Content-Length` beyond it
/// stops the stream (counted unsynced) instead of skipping to a place no stream reaches, and
/// keeps every stream offset far from `u64` overflow.
const MAX_SKIP: u64 = 1 << 62;

/// When the copy first sent the last byte of a request ending at client stream offset `end`:
/// the earliest mark at or past it.
fn sent_at(c: &Conn, ti: usize, end: u64) -> Option<Instant> {
    first_sent_past(&c.sent[ti], c.streams[0].base?, end)
}

/// The earliest of the copy's send marks (sequence number, time) at or past client stream
/// offset `end` of a stream whose byte 0 is `base` (marks before `base` are not).
fn first_sent_past(marks: &VecDeque<(u32, Instant)>, base: SeqNum, end: u64) -> Option<Instant> {
    marks
        .iter()
        .filter(|(seq, _)| {
            let off = SeqNum(*seq).offset_from(base);
            u64::from(off) >= end && off < (1 << 31)
        })
        .map(|&(_, t)| t)
        .min()
}

/// A connection that is not HTTP is compared whole, as bytes: once the online server and every
/// test server closed their side (or a stream stopped), one exchange of the first
/// `max_message` bytes of each stream (the client's as the request).
pub(super) fn whole_connection(c: &mut Conn, cfg: &FlowConfig) -> Vec<(u64, Part)> {
    let sides: &[usize] = if cfg.baseline { &[1, 2, 3] } else { &[1, 2] };
    let ended = |s: &Stream| s.fin || s.dead || s.buf.len() >= cfg.max_message;
    if c.bytes_done || !sides.iter().all(|&i| ended(&c.streams[i])) {
        return Vec::new();
    }
    c.bytes_done = true;
    let take = |s: &mut Stream| {
        let complete = s.fin && !s.dead && s.buf.len() <= cfg.max_message && s.held.is_empty();
        let mut b = std::mem::take(&mut s.buf);
        b.truncate(cfg.max_message);
        s.held.clear();
        s.held_bytes = 0;
        Reply {
            bytes: b,
            complete,
            time: None,
        }
    };
    let mut req = std::mem::take(&mut c.streams[0].buf);
    req.truncate(cfg.max_message.min(4096));
    let mut out = vec![
        (0, Part::Request(c.port, req)),
        (0, Part::Online(take(&mut c.streams[1]))),
    ];
    out.push((0, Part::Candidate(take(&mut c.streams[2]))));
    if cfg.baseline {
        out.push((0, Part::Baseline(take(&mut c.streams[3]))));
    }
    out
}

/// Requests of an HTTP/2 connection remembered for the answer times (streams in flight).
const H2_REQS: usize = 256;

/// Stops the comparison of an HTTP/2 connection (see [`FlowCounts::h2_broken`]): its streams
/// stop and let go of their bytes, its readers too.
pub(super) fn emitted_h2_break(c: &mut Conn, counts: &mut FlowCounts) {
    let Some(h) = c.h2.as_deref_mut() else { return };
    if h.broken {
        return;
    }
    *h = H2Conn::new(0);
    h.broken = true;
    counts.h2_broken += 1;
    for st in &mut c.streams {
        st.start += st.buf.len() as u64;
        st.buf = Vec::new();
        st.held.clear();
        st.held_bytes = 0;
        st.dead = true;
    }
}

/// Reads the whole frames at the head of stream `t` of an HTTP/2 connection; the messages that
/// ended become parts keyed by their stream id (the copy sends the client's bytes as they are,
/// so a test connection's stream N is the online connection's stream N). Pushed streams (even
/// ids) have no request and are left out. A stream that lost bytes, a frame that does not read,
/// or a frame longer than `max_message` stops the connection's comparison.
fn cut_h2(
    c: &mut Conn,
    t: usize,
    cfg: &FlowConfig,
    counts: &mut FlowCounts,
    now: Instant,
) -> Vec<(u64, Part)> {
    let mut out = Vec::new();
    let Conn {
        h2: Some(h2),
        streams,
        reqs,
        sent,
        port,
        ..
    } = c
    else {
        return out;
    };
    if h2.broken {
        return out;
    }
    let base = streams[0].base;
    let st = &mut streams[t];
    if t == 0 && !h2.preface {
        if st.buf.len() < common::h2::PREFACE.len() {
            return out;
        }
        st.buf.drain(..common::h2::PREFACE.len());
        st.start += common::h2::PREFACE.len() as u64;
        h2.preface = true;
    }
    let mut off = 0;
    let mut bad = st.dead;
    loop {
        match h2.readers[t].read(&st.buf[off..], now) {
            Ok(0) => break,
            Ok(n) => off += n,
            Err(_) => {
                bad = true;
                break;
            }
        }
        let end = st.start + off as u64;
        for (sid, m) in h2.readers[t].take_done() {
            if sid % 2 == 0 {
                continue;
            }
            let n = u64::from(sid);
            let complete = m.body_len == m.body.len() as u64;
            let since = match t {
                0 => {
                    let head = m
                        .headers
                        .iter()
                        .any(|(k, v)| k == b":method" && v == b"HEAD");
                    reqs.push_back((n, head, end, now));
                    if reqs.len() > H2_REQS {
                        reqs.pop_front();
                    }
                    out.push((n, Part::Request(*port, request_as_http1(&m))));
                    continue;
                }
                1 => reqs.iter().find(|r| r.0 == n).map(|r| r.3),
                _ => {
                    // from the copy's send of the request's last byte, else 0
                    let req_end = reqs.iter().find(|r| r.0 == n).map(|r| r.2);
                    let sent_t = req_end
                        .zip(base)
                        .and_then(|(e, b)| first_sent_past(&sent[t - 2], b, e));
                    sent_t.or(m.first)
                }
            };
            let first = m.first.unwrap_or(now);
            let time = since.map(|s| first.saturating_duration_since(s));
            let reply = Reply {
                bytes: answer_as_http1(&m),
                complete,
                time,
            };
            out.push((
                n,
                match t {
                    1 => Part::Online(reply),
                    2 => Part::Candidate(reply),
                    _ => Part::Baseline(reply),
                },
            ));
        }
    }
    st.buf.drain(..off);
    st.start += off as u64;
    // a frame longer than the bound (the streams hold at most about `max_message`)
    if common::h2::FrameHeader::parse(&st.buf).is_some_and(|f| f.len as usize > cfg.max_message) {
        bad = true;
    }
    if bad {
        emitted_h2_break(c, counts);
    }
    out
}

/// Cuts the whole messages at the head of stream `t` into parts, with their message index.
pub(super) fn cut_messages(
    c: &mut Conn,
    t: usize,
    cfg: &FlowConfig,
    counts: &mut FlowCounts,
    now: Instant,
) -> Vec<(u64, Part)> {
    let mut out = Vec::new();
    if c.h2.is_some() {
        return cut_h2(c, t, cfg, counts, now);
    }
    loop {
        let st = &mut c.streams[t];
        if st.skip > 0 {
            let k = (st.skip as usize).min(st.buf.len());
            st.buf.drain(..k);
            st.start += k as u64;
            st.skip -= k as u64;
            if st.skip > 0 {
                return out;
            }
            st.first_t = if st.buf.is_empty() { None } else { st.first_t };
        }
        if st.buf.is_empty() {
            return out;
        }
        let is_req = t == 0;
        if !is_req && c.http != Some(true) {
            // answers wait until the client's first bytes tell the protocol (a server that
            // speaks first, such as SMTP, is not HTTP)
            return out;
        }
        if is_req && c.http.is_none() {
            // the HTTP/2 preface (prior knowledge: cleartext HTTP/2 and gRPC)
            let pre = common::h2::PREFACE;
            let k = st.buf.len().min(pre.len());
            if st.buf[..k] == pre[..k] && (k == pre.len() || !st.fin) {
                if k < pre.len() {
                    return out;
                }
                c.http = Some(true);
                c.h2 = Some(Box::new(H2Conn::new(cfg.max_message)));
                counts.h2 += 1;
                return cut_h2(c, t, cfg, counts, now);
            }
            match parse_request_head(&st.buf) {
                Ok(_) => c.http = Some(true),
                // the request line has not ended yet
                Err(HttpError::PartialHead(_)) if !st.fin && st.buf.len() < 8192 => return out,
                Err(_) => {
                    c.http = Some(false);
                    counts.not_http += 1;
                    return out;
                }
            }
        }
        let n = st.n;
        if t >= 2
            && c.streams[0].n <= n
            && !c.streams[0].dead
            && !c.streams[t].dead
            && c.streams[t].buf.len() < cfg.max_message
        {
            // a test answer before the capture showed its request whole (the records came by
            // the faster path): it waits for it, which its time starts from (cut again when
            // the client's stream moves on)
            return out;
        }
        let st = &mut c.streams[t];
        let head = !is_req && c.reqs.iter().any(|r| r.0 == n && r.1);
        let framing = message_len(&st.buf, is_req, head);
        let st = &mut c.streams[t];
        let (len, complete, skip) = match framing {
            Ok(Framing::Complete(len)) => (len, true, 0),
            Ok(Framing::Sized { head, body }) => {
                if st.buf.len() < cfg.max_message {
                    return out;
                }
                // a length no stream reaches (past 2^62 bytes, `Content-Length:
                // 18446744073709551615`) is not a place to skip to: compare what is there, stop
                match head
                    .checked_add(body)
                    .map(|t| t as u64)
                    .filter(|&t| t < MAX_SKIP)
                {
                    Some(total) => (
                        st.buf.len(),
                        false,
                        total.saturating_sub(st.buf.len() as u64),
                    ),
                    None => {
                        st.dead = true;
                        counts.unsynced += 1;
                        (st.buf.len(), false, 0)
                    }
                }
            }
            Ok(Framing::UntilClose) if st.fin => (st.buf.len(), true, 0),
            Ok(Framing::Incomplete | Framing::UntilClose) => {
                if st.buf.len() >= cfg.max_message {
                    // cannot find the end within the bound: compare what is there, then stop
                    st.dead = true;
                    counts.unsynced += 1;
                    (st.buf.len(), false, 0)
                } else if st.dead || st.fin {
                    (st.buf.len(), false, 0)
                } else {
                    return out;
                }
            }
            Err(_) if is_req => {
                st.dead = true;
                counts.unsynced += 1;
                return out;
            }
            Err(_) => {
                // a malformed answer: handed on whole, the comparator counts it; the stream stops
                st.dead = true;
                (st.buf.len(), true, 0)
            }
        };
        let keep = len.min(cfg.max_message);
        let bytes = st.buf[..keep].to_vec();
        st.buf.drain(..len.min(st.buf.len()));
        st.start = st.start.saturating_add(len as u64);
        st.skip = skip;
        st.n += 1;
        let first = st.first_t.take();
        if !st.buf.is_empty() {
            st.first_t = first; // the next message came in the same segment
        }
        let end_off = st.start.saturating_add(skip);
        let part = if is_req {
            let is_head = parse_request_head(&bytes).is_ok_and(|h| h.method == "HEAD");
            // the request is whole now: the online server's answer time starts here
            c.reqs.push_back((n, is_head, end_off, now));
            if c.reqs.len() > 64 {
                c.reqs.pop_front();
            }
            Part::Request(c.port, bytes)
        } else {
            let since = match t {
                1 => c.reqs.iter().find(|r| r.0 == n).map(|r| r.3),
                _ => c.acked[t - 2].remove(&n).or_else(|| {
                    let end = c.reqs.iter().find(|r| r.0 == n)?.2;
                    // acknowledged on the answer only: from the copy's send, else 0
                    sent_at(c, t - 2, end).or(Some(first.unwrap_or(now)))
                }),
            };
            // HTTP/1.x serves pipelined requests one after the other: a request that came
            // while the answer before it was still going out waited for it, not for the server
            let since = since.map(|s| c.streams[t].last_end_t.map_or(s, |e| e.max(s)));
            c.streams[t].last_end_t = Some(c.streams[t].last_t.unwrap_or(now));
            let time = since.map(|s| first.unwrap_or(now).saturating_duration_since(s));
            let reply = Reply {
                bytes,
                complete,
                time,
            };
            match t {
                1 => Part::Online(reply),
                2 => Part::Candidate(reply),
                _ => Part::Baseline(reply),
            }
        };
        out.push((n, part));
        if c.streams[t].dead {
            return out;
        }
    }
}
