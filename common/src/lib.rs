//! What the copier and the intercept share: packet views over bytes ([`wire`]), the one checksum
//! implementation ([`checksum`]), the stable FNV-1a and SplitMix64 hashes ([`hash`]), wrap-around sequence numbers ([`seq`]), the session key
//! ([`flow`]), HTTP/1.x framing ([`http1`]: how long a request or an answer is, chunked bodies walked in any
//! pieces), HTTP/2 framing ([`h2`]: the preface and frame headers) and its header compression
//! ([`hpack`]), the control protocol spoken between them ([`proto`]), capture files ([`pcap`]:
//! pcap/pcapng reading, pcap and pcapng writing), the one escape of text put into HTML and SVG
//! ([`markup`]), the one grammar of durations and sizes on the command
//! lines of the three binaries ([`units`]), the shape of the daemons' metrics tables
//! ([`metrics_table`]) and their reasons tied to labels ([`reasons`]), files of production data made owner-only
//! ([`private`]) and written in whole units that survive a full disk ([`sink`]); and the sample packets and files that every crate's tests build theirs from
//! ([`testkit`]).
//!
//! Nothing here touches a socket or reads the clock, except the optional async helpers in
//! `proto::io` (feature `io`), the host checks of the two doctors (`doctor`, feature `host`), the
//! control connection's socket settings (`control_socket`, feature `host`) and the generated man
//! pages and completions (`docs`, feature `docs`). The `--config FILE` of the
//! binaries (`config_file`, feature `config`) reads its TOML file into long flags.

#![warn(missing_docs)]

pub mod checksum;
#[cfg(feature = "config")]
pub mod config_file;
#[cfg(feature = "host")]
pub mod control_socket;
#[cfg(feature = "docs")]
pub mod docs;
#[cfg(feature = "host")]
pub mod doctor;
pub mod flow;
pub mod h2;
pub mod hash;
pub mod hpack;
pub mod http1;
pub mod markup;
pub mod metrics_table;
pub mod pcap;
pub mod private;
pub mod proto;
pub mod reasons;
pub mod seq;
pub mod sink;
pub mod testkit;
pub mod units;
pub mod wire;
