//! The copier's subcommands ([`Command`]): `copier doctor` (its flags: the copier's own and the
//! doctor's, [`DoctorArgs`]; its checks are `crate::doctor`) and `copier compare-report`.

use std::time::Duration;

use common::units::parse_duration;

use super::CopierArgs;
use crate::compare_report::ReportArgs;

/// The copier's subcommands (next to its flat flags, which run the copier itself).
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check this host and its intercepts and say what to fix (exit status 0 only when copying
    /// would work).
    ///
    /// Takes every flag of the copier (those a check does not need are ignored) and checks
    /// them as the copier would, capture permission and interface (with --mirror: the mirror
    /// input instead: port, datagrams arriving, VNIs, both directions, truncation, the mirror
    /// path's MTU), offloads and MTU, routes to each target and intercept, the intercept
    /// reachable, the secret accepted and the test ports guarded, each test host's route back to
    /// the copied client addresses (the --client-ip pool, or the client networks seen on the
    /// mapped ports) and its rp_filter, ip_forward, conntrack, clock skew. Prints each item with
    /// the command that fixes it; exit status 0 only when copying would work.
    Doctor(Box<DoctorArgs>),
    /// Turn a comparison file (--compare-log) into a static HTML page: endpoints ranked by
    /// difference rate, their differing fields with an example, the noise learned, and a picture
    /// of the difference rate over time.
    CompareReport(ReportArgs),
}

/// `copier doctor`: the copier's own flags (every one; those that do not matter to a check are
/// ignored) and the doctor's. Derefs to the copier's flags.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The copier's flags, as the copier is (or will be) started with them.
    #[command(flatten)]
    pub copier: CopierArgs,

    /// With --mirror: how long to listen for mirrored packets.
    #[arg(long, value_name = "DURATION", default_value = "3s", requires = "mirror", value_parser = parse_duration)]
    pub mirror_listen: Duration,

    /// With --mirror: the MTU of the mirrored interface (the inner packets); the mirror path
    /// must carry it plus the encapsulation's 50 bytes.
    #[arg(long, value_name = "N", default_value_t = 1500, requires = "mirror")]
    pub inner_mtu: u16,

    /// Largest clock difference with an intercept host accepted.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub max_clock_skew: Duration,
}

impl std::ops::Deref for DoctorArgs {
    type Target = CopierArgs;

    fn deref(&self) -> &CopierArgs {
        &self.copier
    }
}
