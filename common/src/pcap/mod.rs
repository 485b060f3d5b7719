//! Capture files: reading pcap and pcapng ([`Reader`]), the link layers they hold ([`link`]),
//! and writing classic pcap ([`PcapWriter`]) and pcapng ([`pcapng_header`], [`pcapng_packet`]).
//!
//! Owns the file formats only: what a record is, its timestamp, which bytes are the IP packet,
//! and what to do with a damaged file. What the packets mean is the caller's business (the
//! copier's offline replay paces them to its engine; `shaper fit` measures sessions in them).
//!
//! Invariants (details in [`reader`]): reading never panics on any input; bad records become a
//! [`Skip`] that names them and the reading goes on; memory stays bounded whatever the file's
//! size. Whatever [`PcapWriter`] writes, [`Reader`] reads back unchanged.

pub mod link;
pub mod reader;
pub mod writer;

#[cfg(test)]
mod tests;

pub use link::{ip_payload, trim_to_ip_len, LinkLayerError, LinkType};
pub use reader::{Event, Packet, ReadError, ReadStats, Reader, Skip, SkipKind, MAX_RECORD};
pub use writer::{pcapng_header, pcapng_packet, PcapWriter};
