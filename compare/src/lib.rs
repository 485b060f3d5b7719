//! Shadow-testing comparison, sans IO: the online service's answer to each copied request is the
//! expected result, and each test server's answer is compared with it.
//!
//! The caller (the copier's comparison thread) feeds the parts of each exchange as they come:
//! the request and the online answer from the capture, each test server's answer from its
//! intercept; [`flows::Flows`] cuts the streams into messages (HTTP/1.x by order, HTTP/2 by
//! stream id through [`h2`]: frames, HPACK, trailers). [`pending::Pending`] pairs them (bounded, with expiry); [`comparator::Comparator`]
//! parses HTTP/1.x ([`http`]: `httparse`, chunked, gzip), flattens answers into fields
//! ([`fields`]: status, headers, JSON leaves as `$.items[3].price`, or bytes), filters noise
//! ([`noise`]: an ignore list, fields where a baseline differs from online, fields that change
//! between answers to identical requests), groups by endpoint ([`endpoint`]: method and path
//! template, capped) and counts ([`stats`]). [`jsonl`] writes differing exchanges to a bounded,
//! rotating JSON Lines file with sampling, and [`report`] turns that file into a static HTML page;
//! [`redact`] keeps the values of credential headers (`Authorization`, `Cookie`, `Set-Cookie`,
//! `Proxy-Authorization` by default) out of both, and out of the logs.
//! No clock and no socket: times are passed in; only [`jsonl`] touches files.

#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod comparator;
pub mod endpoint;
pub mod fields;
pub mod flows;
pub mod h2;
pub mod http;
pub mod jsonl;
pub mod noise;
pub mod pending;
pub mod redact;
pub mod report;
pub mod stats;

pub use comparator::{Comparator, CompareConfig, Exchange, Outcome, Reply, Verdict};
pub use fields::{FieldDiff, Kind};
pub use pending::{Part, Pending};
